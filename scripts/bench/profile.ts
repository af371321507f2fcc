/**
 * CPU profile of one contender under one scenario's load: where the time
 * goes, by function, with our own src/ files singled out.
 *
 *   node --import tsx scripts/bench/profile.ts --contender=router --load=chat --seconds=10
 *
 * The contender runs with `node --cpu-prof` (pinned to CPU 0 as in the
 * bench), this process drives it from CPU 1 with the bench's own load
 * shapes, then reads the profile: self time per function (time spent in the
 * function's own code) and inclusive time for src/ functions (time with the
 * function anywhere on the stack), positions mapped back to the .ts sources.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { compile } from './lib/build.ts';
import { Contender } from './lib/contender.ts';
import { checkFlags, countFlag, flag } from './lib/flag.ts';
import { runLoad, type LoadShape } from './lib/load.ts';
import { inspectMachine } from './lib/machine.ts';
import { sourcePlace } from './lib/source-place.ts';
import { BURST_PREFIX, CHAT_MESSAGE, NO_TURN_PREFIX, SSE_CHUNKS, SSE_MESSAGE, TURN_PREFIX } from './lib/protocol.ts';
import { verifyChat, verifyState, verifyStream } from './lib/verify.ts';

const root = path.resolve(import.meta.dirname, '../..');

const LOADS: Record<string, LoadShape> = {
  chat: { method: 'POST', path: (id) => `/${id}/chat`, id: (c, k) => `chat-${c}-${k}`, body: JSON.stringify({ message: CHAT_MESSAGE }) },
  // Scenario 1's extra row: an agent whose chat() is its own (no turn), on the library contenders only.
  'chat-no-turn': { method: 'POST', path: (id) => `/${id}/chat`, id: (c, k) => `${NO_TURN_PREFIX}${c}-${k}`, body: JSON.stringify({ message: CHAT_MESSAGE }) },
  state: { method: 'GET', path: (id) => `/${id}/state`, id: (c, k) => `state-${c}-${k}` },
  'sse-burst': {
    method: 'POST', path: (id) => `/${id}/chat?stream=true`, id: (c, k) => `${BURST_PREFIX}${c}-${k}`,
    body: JSON.stringify({ message: SSE_MESSAGE }), accept: 'text/event-stream',
  },
  'sse-turn': {
    method: 'POST', path: (id) => `/${id}/chat?stream=true`, id: (c, k) => `${TURN_PREFIX}${c}-${k}`,
    body: JSON.stringify({ message: SSE_MESSAGE }), accept: 'text/event-stream',
  },
};

/** Each load's reply checked once before profiling, as the bench does: a native route has no SSE, and would be profiled answering JSON. */
const CHECKS: Record<string, (contender: Contender) => Promise<void>> = {
  chat: (contender) => verifyChat(contender, 'verify-1'),
  'chat-no-turn': (contender) => verifyChat(contender, `${NO_TURN_PREFIX}verify-1`),
  state: (contender) => verifyState(contender, 'verify-1'),
  'sse-burst': (contender) => verifyStream(contender, `${BURST_PREFIX}verify`, SSE_MESSAGE, SSE_CHUNKS),
  'sse-turn': (contender) => verifyStream(contender, `${TURN_PREFIX}verify`, SSE_MESSAGE, SSE_CHUNKS),
};

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** `src/router/router.ts:120 handle` for a frame of the compiled copy; the frame's own url otherwise. */
function place(frame: ProfileNode['callFrame'], outDir: string): string {
  const name = frame.functionName || '(anonymous)';
  if (frame.url === '') return name;
  return `${name} (${sourcePlace(frame.url, frame.lineNumber, frame.columnNumber, outDir)})`;
}

function analyze(profile: Profile, outDir: string, top: number, requests: number): string {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const self = new Map<string, number>();
  const inclusive = new Map<string, number>();
  let total = 0;
  let idle = 0;
  profile.samples.forEach((leaf, i) => {
    const delta = profile.timeDeltas[i] ?? 0;
    total += delta;
    const leafNode = byId.get(leaf) as ProfileNode;
    const leafName = leafNode.callFrame.functionName;
    if (leafName === '(idle)') {
      idle += delta;
      return;
    }
    const key = place(leafNode.callFrame, outDir);
    self.set(key, (self.get(key) ?? 0) + delta);
    const seen = new Set<string>();
    for (let id: number | undefined = leaf; id !== undefined; id = parent.get(id)) {
      const frame = (byId.get(id) as ProfileNode).callFrame;
      if (!frame.url.startsWith('file:') || !fileURLToPath(frame.url).startsWith(path.join(outDir, 'src'))) continue;
      const name = place(frame, outDir);
      if (seen.has(name)) continue;
      seen.add(name);
      inclusive.set(name, (inclusive.get(name) ?? 0) + delta);
    }
  });
  const busy = total - idle;
  const share = (value: number): string => `${((value / busy) * 100).toFixed(1)}%`;
  const table = (title: string, entries: Array<[string, number]>): string[] => [
    `#### ${title}`, '', '| Function | Share of busy time |', '|---|---:|',
    ...entries.map(([name, value]) => `| \`${name}\` | ${share(value)} |`), '',
  ];
  const sorted = (map: Map<string, number>, filter: (name: string) => boolean = () => true): Array<[string, number]> =>
    [...map].filter(([name]) => filter(name)).sort((a, b) => b[1] - a[1]).slice(0, top);
  const ours = (name: string): boolean => name.includes('(src/');
  const groups = new Map<string, number>();
  for (const [name, value] of self) {
    const group = ours(name) ? 'src/ (our code)' : name.includes('(node_modules/') ? 'node_modules' : /\((?:internal|[a-z_]+)\//.test(name) || name.includes('(events') ? 'node: internals' : name.startsWith('(') ? name.replace(/ .*/, '') : 'other (native, V8 builtins)';
    groups.set(group, (groups.get(group) ?? 0) + value);
  }
  return [
    `Busy ${(busy / 1000).toFixed(0)} ms of ${(total / 1000).toFixed(0)} ms sampled: ${(busy / requests).toFixed(1)} µs of CPU per request (${requests} requests).`, '',
    ...table('Self time by group', sorted(groups)),
    ...table(`Self time, top ${top}`, sorted(self)),
    ...table(`Self time in src/, top ${top}`, sorted(self, ours)),
    ...table(`Inclusive time of src/ functions, top ${top}`, sorted(inclusive)),
  ].join('\n');
}

const USAGE = `Usage: node --import tsx scripts/bench/profile.ts [--contender=router] [--load=chat] [--seconds=10] [--connections=32] [--top=25]
  --contender  a file of scripts/bench/contenders/ (bare, router, server, fastify, fastify-router, express, ...)
  --load       ${Object.keys(LOADS).join(', ')}
  --seconds    seconds of load while the contender runs under --cpu-prof
  --connections  load generator connections
  --top        rows per table`;
checkFlags(USAGE, ['contender', 'load', 'seconds', 'connections', 'top']);
const contenderName = flag('contender', 'router');
const loadName = flag('load', 'chat');
const seconds = countFlag('seconds', 10, USAGE, true);
const top = countFlag('top', 25, USAGE);
const connections = countFlag('connections', 32, USAGE);
const shape = LOADS[loadName];
if (shape === undefined) {
  process.stderr.write(`profile: --load must be one of ${Object.keys(LOADS).join(', ')}\n${USAGE}\n`);
  process.exit(2);
}
const machine = inspectMachine();
const build = compile(root, machine.pinned);
const profileDir = mkdtempSync(path.join(os.tmpdir(), 'agent-router-profile-'));
try {
  const contender = await Contender.start(build.runtime, contenderName, { extraNodeFlags: ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] });
  try {
    await (CHECKS[loadName] as (contender: Contender) => Promise<void>)(contender);
  } catch (error) {
    await contender.stop();
    throw error;
  }
  const result = await runLoad(contender, shape, seconds, connections);
  await contender.stop(10_000);
  const file = readdirSync(profileDir).find((name) => name.endsWith('.cpuprofile'));
  if (file === undefined) throw new Error(`profile: ${contenderName} wrote no .cpuprofile`);
  const outDir = path.resolve(build.runtime.contendersDir, '../../..');
  process.stdout.write(`### Profile: ${contenderName} under ${loadName} load, ${seconds} s, ${Math.round(result.rate)} req/s (server CPU ${Math.round(result.serverCpu * 100)}%)\n\n`);
  process.stdout.write(`${analyze(JSON.parse(readFileSync(path.join(profileDir, file), 'utf8')) as Profile, outDir, top, result.requests)}\n`);
} finally {
  build.cleanup();
  rmSync(profileDir, { recursive: true, force: true });
}
