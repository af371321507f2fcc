/**
 * User-space CPU per request of the router, the bare server and, with
 * `--base`, the router as it was at another commit, all in this one
 * process, served through in-memory connections (lib/memory-connection.ts):
 * no sockets, no kernel, no other process to wake. Batches of requests
 * alternate between the sides, so a slow second of the machine falls on
 * all of them, and each side's batch is compared with the other sides'
 * batches of the same round.
 *
 *   node --import tsx scripts/bench/ab.ts                          router against bare, JSON chat
 *   node --import tsx scripts/bench/ab.ts --base=HEAD~1            ... and against the previous commit's router
 *   node --import tsx scripts/bench/ab.ts --load=state --rounds=600
 *
 * What this measures is work, not throughput: `npm run bench` measures
 * requests/s over loopback, where the kernel's share and the cost of waking
 * the load generator add to every request (BENCHMARKS.md, "Why chat is
 * where it is"). Use this to tell whether a change to src/ made the serving
 * path cheaper, which the full bench cannot resolve below 10-20%.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import http, { type RequestListener } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { compile, type Build } from './lib/build.ts';
import { MemoryLoad, type ExpectedReply, type MemoryRequest } from './lib/memory-connection.ts';
import { BURST_PREFIX, CHAT_MESSAGE, chunksOf, NO_TURN_PREFIX, SSE_MESSAGE, TURN_PREFIX } from './lib/protocol.ts';
import { median, percentile } from './lib/stats.ts';

const root = path.resolve(import.meta.dirname, '../..');

const USAGE = `Usage: node --import tsx scripts/bench/ab.ts [--base=REV] [--load=chat|chat-no-turn|state|sse-burst|sse-turn]
       [--rounds=300] [--batch=500] [--warmup=20] [--connections=32]
  --base=REV   also serve the router as it is at git revision REV (e.g. HEAD, HEAD~1, main)
  --load       what each request is (default chat: POST /{id}/chat, a real turn; sse-*: a 64-chunk stream)
  --rounds     rounds; each runs one batch per side, the sides' order going through every permutation
  --batch      requests per side per round
  --warmup     batches per side before measuring
  --connections  in-memory keep-alive connections per side`;

const FLAGS = ['base', 'load', 'rounds', 'batch', 'warmup', 'connections'];
for (const arg of process.argv.slice(2)) {
  if (arg === '--help' || arg === '-h') {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  if (!FLAGS.some((name) => arg.startsWith(`--${name}=`))) {
    process.stderr.write(`ab: unknown option ${arg}\n${USAGE}\n`);
    process.exit(2);
  }
}

function flag(name: string, fallback: string): string {
  const prefix = `--${name}=`;
  return process.argv.find((arg) => arg.startsWith(prefix))?.slice(prefix.length) ?? fallback;
}

function fail(message: string): never {
  process.stderr.write(`ab: ${message}\n${USAGE}\n`);
  process.exit(2);
}

const chatBody = JSON.stringify({ message: CHAT_MESSAGE });
const sseBody = JSON.stringify({ message: SSE_MESSAGE });
const idOf = (request: MemoryRequest): string => request.path.split('/')[1] as string;

/** A JSON reply must be exactly this. */
function jsonProblem(expected: (id: string) => string): ExpectedReply['problem'] {
  return (request, body) => {
    const wanted = expected(idOf(request));
    return body === wanted ? undefined : `expected ${wanted}`;
  };
}

/** An SSE reply must hold every chunk of the message, in order, then the done event. */
const sseProblem: ExpectedReply['problem'] = (_request, body) => {
  let at = 0;
  for (const chunk of chunksOf(SSE_MESSAGE)) {
    at = body.indexOf(`data: ${chunk}\n\n`, at);
    if (at === -1) return `a chunk is missing: ${JSON.stringify(chunk)}`;
  }
  return body.includes('event: done\ndata: [DONE]\n\n', at) ? undefined : 'no done event after the chunks';
};

const chatReply = jsonProblem((id) => `{"agent_id":"${id}","response":${JSON.stringify(CHAT_MESSAGE)}}`);
const LOADS: Record<string, { request: (id: string) => MemoryRequest; id: (connection: number, k: number) => string; expected: ExpectedReply }> = {
  chat: {
    id: (c, k) => `chat-${c}-${k % 16}`,
    request: (id) => ({ method: 'POST', path: `/${id}/chat`, body: chatBody }),
    expected: { status: 200, problem: chatReply },
  },
  'chat-no-turn': {
    id: (c, k) => `${NO_TURN_PREFIX}${c}-${k % 16}`,
    request: (id) => ({ method: 'POST', path: `/${id}/chat`, body: chatBody }),
    expected: { status: 200, problem: chatReply },
  },
  state: {
    id: (c, k) => `state-${c}-${k % 16}`,
    request: (id) => ({ method: 'GET', path: `/${id}/state` }),
    expected: { status: 200, problem: jsonProblem((id) => `{"agent_id":"${id}","state":{"topic":"benchmarks"}}`) },
  },
  // Scenario 3's streams: 64 chunks handed over back to back, or one per event-loop turn. Per request, not per chunk.
  'sse-burst': {
    id: (c, k) => `${BURST_PREFIX}${c}-${k % 16}`,
    request: (id) => ({ method: 'POST', path: `/${id}/chat?stream=true`, body: sseBody, accept: 'text/event-stream' }),
    expected: { status: 200, problem: sseProblem },
  },
  'sse-turn': {
    id: (c, k) => `${TURN_PREFIX}${c}-${k % 16}`,
    request: (id) => ({ method: 'POST', path: `/${id}/chat?stream=true`, body: sseBody, accept: 'text/event-stream' }),
    expected: { status: 200, problem: sseProblem },
  },
};

const loadName = flag('load', 'chat');
const shape = LOADS[loadName];
if (shape === undefined) fail(`--load must be one of ${Object.keys(LOADS).join(', ')}`);
const rounds = Number(flag('rounds', '300'));
const batch = Number(flag('batch', '500'));
const warmup = Number(flag('warmup', '20'));
const connections = Number(flag('connections', '32'));
const base = flag('base', '');
for (const [name, value] of Object.entries({ rounds, batch, warmup, connections })) {
  if (!Number.isSafeInteger(value) || value < (name === 'warmup' ? 0 : 1)) fail(`--${name} must be a whole number${name === 'warmup' ? '' : ' above 0'}`);
}

/**
 * A module of `tree` (this checkout, or a commit's copy) as the bench runs
 * it: compiled by tsc, since tsx's output names every closure it makes
 * (esbuild's keepNames: a property definition per closure per request).
 */
async function importFrom(build: Build, file: string): Promise<any> {
  const out = path.resolve(build.runtime.contendersDir, '../../..');
  return import(pathToFileURL(path.join(out, file.replace(/\.ts$/, build.runtime.extension))).href);
}

/** A router over the bench's registry, from `build`'s src/. */
async function routerListener(build: Build): Promise<RequestListener> {
  const { AgentRouter } = await importFrom(build, 'src/http/router.ts');
  const { benchRegistry, CAPACITY } = await importFrom(build, 'scripts/bench/contenders/agents.ts');
  return new AgentRouter(benchRegistry(), { maxStreams: CAPACITY, maxAgents: CAPACITY }).toRequestListener();
}

/** `rev`'s src/ and scripts/bench/ in a temporary folder, sharing this checkout's node_modules. */
function checkout(rev: string): { tree: string; cleanup: () => void } {
  try {
    execFileSync('git', ['rev-parse', '--verify', '--quiet', `${rev}^{commit}`], { cwd: root, stdio: 'ignore' });
  } catch {
    fail(`--base=${rev} is not a commit of this repository`);
  }
  const tree = mkdtempSync(path.join(os.tmpdir(), 'agent-router-ab-'));
  const archive = execFileSync('git', ['archive', '--format=tar', rev, 'src', 'scripts/bench', 'tsconfig.json', 'package.json'], { cwd: root, maxBuffer: 1 << 28 });
  execFileSync('tar', ['-x', '-C', tree], { input: archive });
  symlinkSync(path.join(root, 'node_modules'), path.join(tree, 'node_modules'));
  return { tree, cleanup: () => rmSync(tree, { recursive: true, force: true }) };
}

/** Every order of `items`. */
function permutations(items: number[]): number[][] {
  if (items.length <= 1) return [items];
  return items.flatMap((item, i) => permutations([...items.slice(0, i), ...items.slice(i + 1)]).map((rest) => [item, ...rest]));
}

// One CPU for the whole run, as the bench's contenders get (Linux only; elsewhere it runs where the OS puts it).
try {
  execFileSync('taskset', ['-a', '-cp', '0', String(process.pid)], { stdio: 'ignore' });
} catch {
  process.stderr.write('ab: taskset failed or is missing; running unpinned\n');
}

const builds: Build[] = [];
const baseTree = base === '' ? undefined : checkout(base);
try {
  const current = compile(root, false);
  builds.push(current);
  const sides: Array<{ name: string; listener: RequestListener }> = [
    { name: 'bare node:http', listener: (await importFrom(current, 'scripts/bench/lib/bare-listener.ts')).bareListener },
    { name: 'router (this checkout)', listener: await routerListener(current) },
  ];
  if (baseTree !== undefined) {
    const rev = execFileSync('git', ['rev-parse', '--short', base], { cwd: root, encoding: 'utf8' }).trim();
    const built = compile(baseTree.tree, false, 'base');
    builds.push(built);
    sides.push({ name: `router at ${base} (${rev})`, listener: await routerListener(built) });
  }
  const notes = builds.map((build) => build.note).filter((note) => note.includes('tsx'));
  const loads = sides.map(({ listener }) => new MemoryLoad(http.createServer(listener), connections, shape.expected));
  const next = (c: number, k: number): MemoryRequest => shape.request(shape.id(c, k));
  for (let i = 0; i < warmup; i++) for (const load of loads) await load.run(batch, next);
  // perRequest[side][round]: µs of this process's CPU per request of that side's batch in that round.
  const perRequest: number[][] = sides.map(() => []);
  const started = performance.now();
  // Every order of the sides in turn: a batch costs a few percent more right after some other side's
  // (measured: 5-7% after bare's in the SSE burst), so each side must follow each other side as often.
  // No collection between batches: a scavenge falls in a side's batches in proportion to what that
  // side allocates, so each pays its share of garbage collection, as a server serving it alone would.
  const orders = permutations(sides.map((_, i) => i));
  for (let round = 0; round < rounds; round++) {
    for (const side of orders[round % orders.length] as number[]) {
      const before = process.cpuUsage();
      await (loads[side] as MemoryLoad).run(batch, next);
      const spent = process.cpuUsage(before);
      (perRequest[side] as number[]).push((spent.user + spent.system) / batch);
    }
  }
  const seconds = (performance.now() - started) / 1000;
  for (const load of loads) load.close();

  const fixed = (value: number, digits = 2): string => value.toFixed(digits);
  const lines = [
    `### In-memory A/B: ${loadName}, ${rounds} rounds of ${batch} requests per side, ${connections} connections (${fixed(seconds, 1)} s)`,
    '',
    '| Side | CPU µs/request, median | p25 - p75 |',
    '|---|---:|---:|',
    ...sides.map(({ name }, i) => {
      const values = perRequest[i] as number[];
      return `| ${name} | ${fixed(median(values))} | ${fixed(percentile(values, 25))} - ${fixed(percentile(values, 75))} |`;
    }),
    '',
    '| Ratio, batch by batch in the same round | median | p25 - p75 |',
    '|---|---:|---:|',
  ];
  const pairs: Array<[number, number]> = [[1, 0]];
  if (sides.length > 2) pairs.push([1, 2], [2, 0]);
  for (const [a, b] of pairs) {
    const ratios = (perRequest[a] as number[]).map((value, round) => value / ((perRequest[b] as number[])[round] as number));
    lines.push(`| ${sides[a]?.name} / ${sides[b]?.name} | ${fixed(median(ratios), 3)} | ${fixed(percentile(ratios, 25), 3)} - ${fixed(percentile(ratios, 75), 3)} |`);
  }
  for (const note of notes) lines.push('', `Warning: ${note}.`);
  lines.push('', 'Work in this process only (the client\'s share, the same for every side, included); no kernel, no wake-ups. The same code on both sides gives 0.96 to 1.01 (the side loaded first, this checkout, may run a little cheaper): read differences above 4%.');
  process.stdout.write(`${lines.join('\n')}\n`);
} finally {
  for (const build of builds) build.cleanup();
  baseTree?.cleanup();
}
process.exit(0);
