/**
 * CPU per request (nearly all of it in user space) of the router, the bare
 * server and, with `--base`, the router as it was at another commit, served
 * side by side in one process through in-memory connections
 * (lib/memory-connection.ts): no sockets, no kernel, no other process to
 * wake. Batches of requests alternate between the sides, so a slow second
 * of the machine falls on all of them, and each side's batch is compared
 * with the other sides' batches of the same round. With `--base`, two such
 * processes share the rounds, one per import order (see measureInChild).
 *
 *   node --import tsx scripts/bench/ab.ts                          router against bare, JSON chat
 *   node --import tsx scripts/bench/ab.ts --base=HEAD~1            ... and against the previous commit's router
 *   node --import tsx scripts/bench/ab.ts --load=state --rounds=600
 *
 * What this measures is work, not throughput: `npm run bench` measures
 * requests/s over loopback, where the kernel's share and the cost of waking
 * the load generator add to every request (BENCHMARKS.md, "What the
 * numbers do not measure"). Use this to tell whether a change to src/ made the serving
 * path cheaper, which the full bench cannot resolve below 10-20%.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import http, { type RequestListener, type Server } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { compile, type Build } from './lib/build.ts';
import { flag } from './lib/flag.ts';
import { MemoryLoad, type ExpectedReply, type MemoryRequest } from './lib/memory-connection.ts';
import { BURST_PREFIX, CHAT_MESSAGE, chunksOf, NO_TURN_PREFIX, SSE_MESSAGE, TURN_PREFIX } from './lib/protocol.ts';
import { median, percentile } from './lib/stats.ts';

const root = path.resolve(import.meta.dirname, '../..');

const USAGE = `Usage: node --import tsx scripts/bench/ab.ts [--base=REV] [--load=chat|chat-no-turn|state|sse-burst|sse-turn]
       [--host=node|fastify|server] [--rounds=300] [--batch=500] [--warmup=20] [--connections=32]
  --base=REV   also serve the router as it is at git revision REV (e.g. HEAD, HEAD~1, main)
  --host       fastify: the router inside Fastify 5 (toFastify), against Fastify's native routes instead of bare
               (chat and state loads only)
               server: AgentServer's listener (routes under /agent), against bare
  --load       what each request is (default chat: POST /{id}/chat, a real turn; sse-*: a 64-chunk stream)
  --rounds     rounds; each runs one batch per side, the sides' order going through every permutation
  --batch      requests per side per round
  --warmup     batches per side before measuring
  --connections  in-memory keep-alive connections per side`;

/** `part` is internal: a run with --base measures in two child processes, one per import order (see below). */
const FLAGS = ['base', 'load', 'host', 'rounds', 'batch', 'warmup', 'connections', 'part'];
const given = new Set<string>();
for (const arg of process.argv.slice(2)) {
  if (arg === '--help' || arg === '-h') {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  const name = FLAGS.find((flagName) => arg.startsWith(`--${flagName}=`));
  if (name === undefined) {
    process.stderr.write(`ab: unknown option ${arg}\n${USAGE}\n`);
    process.exit(2);
  }
  if (given.has(name)) {
    process.stderr.write(`ab: --${name} is given twice\n${USAGE}\n`);
    process.exit(2);
  }
  given.add(name);
}

/** What to remove however this process ends: process.exit() skips `finally`, so cleanups run on 'exit'. */
const cleanups = new Set<() => void>();
process.on('exit', () => {
  // Latest first: a build of the base's lives under the base's tree (through its node_modules link).
  for (const cleanup of [...cleanups].reverse()) cleanup();
});
// Ctrl-C or a kill must not leave the compiled copies and the base's tree behind.
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => process.exit(130));

function fail(message: string): never {
  process.stderr.write(`ab: ${message}\n${USAGE}\n`);
  process.exit(2);
}

const chatBody = JSON.stringify({ message: CHAT_MESSAGE });
const sseBody = JSON.stringify({ message: SSE_MESSAGE });
// AgentServer's paths (--host=server) start with /agent: the id follows it.
const idOf = (request: MemoryRequest): string => request.path.split('/')[request.path.startsWith('/agent/') ? 2 : 1] as string;

/** A JSON reply must be exactly this. */
function jsonProblem(expected: (id: string) => string): ExpectedReply['problem'] {
  return (request, body) => {
    const wanted = expected(idOf(request));
    return body === wanted ? undefined : `expected ${wanted}`;
  };
}

/**
 * A chat reply names its turn (`"turn_id":"<uuid>"` right after `agent_id`); a --base from before turn
 * ids sends none. Checked by slicing, not a regex, so the check costs every side about the same.
 */
function withoutTurnId(problem: ExpectedReply['problem']): ExpectedReply['problem'] {
  return (request, body) => {
    const at = body.indexOf('"turn_id":"');
    if (at === -1) return problem(request, body);
    const id = body.slice(at + 11, at + 47);
    if (id.length !== 36 || id[8] !== '-' || id[23] !== '-' || body.slice(at + 47, at + 49) !== '",') return `a malformed turn_id: ${body.slice(at, at + 60)}`;
    return problem(request, body.slice(0, at) + body.slice(at + 49));
  };
}

/**
 * An SSE reply must hold every chunk of the message, in order, then the done event. An event's
 * `id:` line (before its data) is left in place: stripping it would cost only the side that sends ids.
 */
const sseProblem: ExpectedReply['problem'] = (_request, body) => {
  let at = 0;
  for (const chunk of chunksOf(SSE_MESSAGE)) {
    at = body.indexOf(`data: ${chunk}\n\n`, at);
    if (at === -1) return `a chunk is missing: ${JSON.stringify(chunk)}`;
  }
  const done = body.indexOf('event: done\n', at);
  return done !== -1 && body.includes('data: [DONE]\n\n', done) ? undefined : 'no done event after the chunks';
};

const chatReply = withoutTurnId(jsonProblem((id) => `{"agent_id":"${id}","response":${JSON.stringify(CHAT_MESSAGE)}}`));
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
const shape = LOADS[loadName] ?? fail(`--load must be one of ${Object.keys(LOADS).join(', ')}`);
const host = flag('host', 'node');
if (host !== 'node' && host !== 'fastify' && host !== 'server') fail('--host must be node, fastify or server');
if (host === 'fastify' && loadName !== 'chat' && loadName !== 'state') fail('--host=fastify has native routes for the chat and state loads only');
const rounds = Number(flag('rounds', '300'));
const batch = Number(flag('batch', '500'));
const warmup = Number(flag('warmup', '20'));
const connections = Number(flag('connections', '32'));
const base = flag('base', '');
if (given.has('base') && base === '') fail('--base needs a revision, e.g. --base=HEAD');
const part = flag('part', '');
if (part !== '' && part !== 'checkout-first' && part !== 'base-first') fail('--part is internal: checkout-first or base-first');
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

/** A router over the bench's registry, from `build`'s src/: on node:http, inside Fastify with --host=fastify, AgentServer's with --host=server. */
async function routerServer(build: Build): Promise<Server> {
  const { benchRegistry, CAPACITY } = await importFrom(build, 'scripts/bench/contenders/agents.ts');
  if (host === 'server') {
    const { AgentServer } = await importFrom(build, 'src/server/server.ts');
    // Its listener on a server of ours, as the bench's contender serves it (no serve(): no port to listen on here).
    return http.createServer(new AgentServer(benchRegistry(), { maxAgents: CAPACITY, maxStreams: CAPACITY }).listener);
  }
  // Before the router got a folder of its own it lived in src/http/: a --base from then still runs.
  const { AgentRouter } = await importFrom(build, 'src/router/router.ts').catch(() => importFrom(build, 'src/http/router.ts'));
  const router = new AgentRouter(benchRegistry(), { maxStreams: CAPACITY, maxAgents: CAPACITY });
  if (host === 'node') return http.createServer(router.toRequestListener());
  const { toFastify } = await importFrom(build, 'src/adapters/fastify.ts');
  return fastifyServer((app) => app.register(toFastify(router)));
}

/** The side the router is compared with: the bare server, or Fastify's native routes (as the bench's `fastify` contender). */
async function referenceServer(current: Build): Promise<Server> {
  if (host !== 'fastify') return http.createServer((await importFrom(current, 'scripts/bench/lib/bare-listener.ts')).bareListener);
  const { BAD_MESSAGE, chatReply, stateReply } = await importFrom(current, 'scripts/bench/contenders/native-handlers.ts');
  return fastifyServer((app) => {
    app.post('/:id/chat', async (request: any, reply: any) => chatReply(request.params.id, request.body) ?? reply.code(400).send(BAD_MESSAGE));
    app.get('/:id/state', async (request: any) => stateReply(request.params.id));
  });
}

/** A ready Fastify 5 app's server, never listening: the in-memory connections are handed to it. */
async function fastifyServer(setUp: (app: any) => unknown): Promise<Server> {
  const { default: Fastify } = await import('fastify5');
  let server: Server | undefined;
  const app = Fastify({ logger: false, serverFactory: (handler: RequestListener) => (server = http.createServer(handler)) });
  await setUp(app);
  await app.ready();
  return server as Server;
}

/** `rev`'s src/ and scripts/bench/ in a temporary folder, sharing this checkout's node_modules. */
function checkout(rev: string): { tree: string; cleanup: () => void } {
  try {
    execFileSync('git', ['rev-parse', '--verify', '--quiet', `${rev}^{commit}`], { cwd: root, stdio: 'ignore' });
  } catch {
    fail(`--base=${rev} is not a commit of this repository`);
  }
  const tree = mkdtempSync(path.join(os.tmpdir(), 'agent-router-ab-'));
  const cleanup = (): void => rmSync(tree, { recursive: true, force: true });
  try {
    const archive = execFileSync('git', ['archive', '--format=tar', rev, 'src', 'scripts/bench', 'tsconfig.json', 'package.json'], { cwd: root, maxBuffer: 1 << 28, stdio: ['ignore', 'pipe', 'pipe'] });
    execFileSync('tar', ['-x', '-C', tree], { input: archive });
    symlinkSync(path.join(root, 'node_modules'), path.join(tree, 'node_modules'));
  } catch (error) {
    cleanup();
    fail(`--base=${rev}: could not copy its src/ and scripts/bench/ (${error instanceof Error ? error.message.split('\n')[0] : String(error)}); the bench came with dd1b7c5`);
  }
  cleanups.add(cleanup);
  return { tree, cleanup };
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
  if (part === '') process.stderr.write('ab: taskset failed or is missing; running unpinned\n');
}

/** What one process measured: perRequest[side][round], µs of its CPU per request of that side's batch in that round. */
interface Measured {
  names: string[];
  perRequest: number[][];
  seconds: number;
  notes: string[];
}

/** Each host's yardstick, and what it serves from this checkout (and from --base). */
const SIDES: Record<string, [string, string]> = {
  node: ['bare node:http', 'router'],
  fastify: ['Fastify 5 native routes', 'router in Fastify'],
  server: ['bare node:http', 'AgentServer'],
};

/** Builds the sides in this process, the base's router first when `baseFirst`, and runs `rounds` rounds. */
async function measure(baseFirst: boolean, rounds: number): Promise<Measured> {
  const builds: Build[] = [];
  const baseTree = base === '' ? undefined : checkout(base);
  const cleanup = (): void => {
    for (const build of builds) build.cleanup();
    baseTree?.cleanup();
  };
  cleanups.add(cleanup);
  try {
    const current = compile(root, false);
    builds.push(current);
    const [reference, served] = SIDES[host] as [string, string];
    const names = [reference, `${served} (this checkout)`];
    let baseServer: Server | undefined;
    let built: Build | undefined;
    if (baseTree !== undefined) {
      const rev = execFileSync('git', ['rev-parse', '--short', base], { cwd: root, encoding: 'utf8' }).trim();
      built = compile(baseTree.tree, false, 'base');
      builds.push(built);
      await sameIds(current, built);
      names.push(`${served} at ${base} (${rev})`);
      if (baseFirst) baseServer = await routerServer(built);
    }
    const servers = [await referenceServer(current), await routerServer(current)];
    if (built !== undefined) servers.push(baseServer ?? (await routerServer(built)));
    const loads = servers.map((server) => new MemoryLoad(server, connections, shape.expected));
    const next = (c: number, k: number): MemoryRequest => shape.request(shape.id(c, k));
    // AgentServer serves the same routes under /agent; the reference side (bare) at the root.
    const underAgent = (c: number, k: number): MemoryRequest => {
      const request = next(c, k);
      return { ...request, path: `/agent${request.path}` };
    };
    const nextOf = (side: number): ((c: number, k: number) => MemoryRequest) => (host === 'server' && side > 0 ? underAgent : next);
    for (let i = 0; i < warmup; i++) for (const [side, load] of loads.entries()) await load.run(batch, nextOf(side));
    const perRequest: number[][] = servers.map(() => []);
    const started = performance.now();
    // Every order of the sides in turn: a batch costs a few percent more right after some other side's
    // (measured: 5-7% after bare's in the SSE burst), so each side must follow each other side as often.
    // No collection between batches: a scavenge falls in a side's batches in proportion to what that
    // side allocates, so each pays its share of garbage collection, as a server serving it alone would.
    const orders = permutations(servers.map((_, i) => i));
    for (let round = 0; round < rounds; round++) {
      for (const side of orders[round % orders.length] as number[]) {
        const before = process.cpuUsage();
        await (loads[side] as MemoryLoad).run(batch, nextOf(side));
        // What the last replies left for later (finish callbacks, socket upkeep) is this side's work too.
        await new Promise(setImmediate);
        const spent = process.cpuUsage(before);
        (perRequest[side] as number[]).push((spent.user + spent.system) / batch);
      }
    }
    const seconds = (performance.now() - started) / 1000;
    for (const load of loads) load.close();
    return { names, perRequest, seconds, notes: builds.map((build) => build.note).filter((note) => note.includes('tsx')) };
  } finally {
    cleanups.delete(cleanup);
    cleanup();
  }
}

/**
 * The ids this checkout sends must pick the same agents in the base's
 * registry: a base older than a load's id prefix would serve those ids with
 * another agent (its echo turn for chat-no-turn), and the ratio would
 * compare different work.
 */
async function sameIds(current: Build, built: Build): Promise<void> {
  const ours = await importFrom(current, 'scripts/bench/lib/protocol.ts');
  const theirs = await importFrom(built, 'scripts/bench/lib/protocol.ts');
  for (const name of ['NO_TURN_PREFIX', 'BURST_PREFIX', 'TURN_PREFIX'] as const) {
    if (ours[name] !== theirs[name]) fail(`--base=${base} has no ${name} (${JSON.stringify(ours[name])}): its agents differ from this checkout's; pick a later base`);
  }
}

/**
 * A run with --base measures in two child processes, each for half the
 * rounds, one importing this checkout's router first and the other the
 * base's: in one process the router imported first tends to run a little
 * cheaper (the same code read 0.96-0.99 that way), which would favour this
 * checkout every time.
 */
function measureInChild(order: 'checkout-first' | 'base-first', rounds: number): Measured {
  const args = process.argv.slice(2).filter((arg) => !arg.startsWith('--rounds='));
  const child = spawnSync(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url), ...args, `--rounds=${rounds}`, `--part=${order}`], {
    encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], maxBuffer: 1 << 26,
  });
  if (child.status !== 0) process.exit(child.status ?? 1);
  return JSON.parse(child.stdout) as Measured;
}

let measured: Measured;
if (part !== '') {
  process.stdout.write(JSON.stringify(await measure(part === 'base-first', rounds)));
  process.exit(0);
} else if (base === '') {
  measured = await measure(false, rounds);
} else {
  const first = measureInChild('checkout-first', Math.ceil(rounds / 2));
  const second = rounds > 1 ? measureInChild('base-first', Math.floor(rounds / 2)) : undefined;
  measured = second === undefined ? first : {
    names: first.names,
    perRequest: first.perRequest.map((values, side) => [...values, ...(second.perRequest[side] as number[])]),
    seconds: first.seconds + second.seconds,
    notes: [...new Set([...first.notes, ...second.notes])],
  };
}

const { names, perRequest, seconds, notes } = measured;
const fixed = (value: number, digits = 2): string => value.toFixed(digits);
const lines = [
  `### In-memory A/B: ${loadName}, ${rounds} rounds of ${batch} requests per side, ${connections} connections (${fixed(seconds, 1)} s)`,
  '',
  '| Side | CPU µs/request, median | p25 - p75 |',
  '|---|---:|---:|',
  ...names.map((name, i) => {
    const values = perRequest[i] as number[];
    return `| ${name} | ${fixed(median(values))} | ${fixed(percentile(values, 25))} - ${fixed(percentile(values, 75))} |`;
  }),
  '',
  '| Ratio, batch by batch in the same round | median | p25 - p75 |',
  '|---|---:|---:|',
];
const pairs: Array<[number, number]> = [[1, 0]];
if (names.length > 2) pairs.push([1, 2], [2, 0]);
for (const [a, b] of pairs) {
  const ratios = (perRequest[a] as number[]).map((value, round) => value / ((perRequest[b] as number[])[round] as number));
  lines.push(`| ${names[a]} / ${names[b]} | ${fixed(median(ratios), 3)} | ${fixed(percentile(ratios, 25), 3)} - ${fixed(percentile(ratios, 75), 3)} |`);
}
for (const note of notes) lines.push('', `Warning: ${note}.`);
lines.push('', 'CPU time of this process (user and system; in memory nearly all user), the in-memory client\'s share included on every side; no kernel network stack, no wake-ups. The same code on both sides reads about 0.97 to 1.03: read differences above 4%.');
process.stdout.write(`${lines.join('\n')}\n`);
process.exit(0);
