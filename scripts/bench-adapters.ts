/**
 * What mounting the router in a framework costs, against the same
 * framework's own route doing the same work. Not a test: a measurement to read.
 *
 *   npx tsx scripts/bench-adapters.ts [--rounds 5] [--duration 3] [--connections 10] [--only express4,fastify5]
 *
 * For each of Express 4 and 5, Koa 2 and 3, Fastify 4 and 5, a child process
 * serves one app with three routes, all behind the framework's usual JSON body
 * parser (express.json(), @koa/bodyparser, Fastify's own):
 *   native        POST /native/{id}/chat: a handler written for the framework
 *                 that validates `message`, finds or creates the agent in a
 *                 Map and answers `{"agent_id", "response"}` from
 *                 `agent.chat(message)`;
 *   native+abort  POST /abort/{id}/chat: the same, plus what the router also
 *                 does for every turn: an AbortController aborted when the
 *                 client goes away, its signal passed to `agent.chat`;
 *   router        POST /api/{id}/chat: a registry AgentRouter mounted with
 *                 toExpress / toKoa / toFastify, reusing the parsed body.
 * All use the same Agent class (echo model, their own MemoryStorage), so the
 * JSON in and out is byte-for-byte the same (checked before measuring). Ids
 * rotate over 1000 agents so no history grows long enough to matter.
 *
 * This process drives autocannon (one core; the server has the other),
 * alternating the contenders (A B C A B C ..., after one unmeasured warm-up
 * each) so drift on a shared machine hits all alike, and reports the median of
 *   req/s        what autocannon measured (the goal: router >= 0.9x native);
 *   CPU us/req   the server process's CPU time (process.cpuUsage, user +
 *                system, all its threads) per answered request: steadier
 *                than req/s when other work shares the machine, and the only
 *                honest number when the single-threaded client, not the
 *                server, is the bottleneck (a profile of Fastify showed the
 *                server idle 40% of the time).
 * Ratios read "router as a fraction of the baseline" (above 1: the router is
 * faster, or cheaper): req/s router/baseline, CPU baseline/router. It ignores
 * latency and anything but non-streaming JSON chat. Rerun for a second look:
 * single runs on a shared machine are noisy.
 */
import { fork } from 'node:child_process';
import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Agent } from '../src/agent/agent.ts';
import { toExpress } from '../src/adapters/express.ts';
import { toFastify } from '../src/adapters/fastify.ts';
import { toKoa } from '../src/adapters/koa.ts';
import { AgentRouter } from '../src/router/router.ts';
import { echoModel } from '../src/models/echo.ts';
import { AgentRegistry } from '../src/registry/registry.ts';
import { MemoryStorage } from '../src/storage/memory.ts';

const FRAMEWORKS = ['express4', 'express5', 'koa2', 'koa3', 'fastify4', 'fastify5'] as const;
type Framework = (typeof FRAMEWORKS)[number];
const CONTENDERS = [
  ['native', '/native'],
  ['native+abort', '/abort'],
  ['router', '/api'],
] as const;
const IDS = 1000;
const BODY = JSON.stringify({ message: 'hello from the adapter benchmark' });

// ---- server (child process) ----

function echoAgentClass(): new (id: string) => Agent {
  const storage = new MemoryStorage();
  return class EchoAgent extends Agent {
    constructor(id: string) {
      super(id, { model: echoModel(), storage });
    }
  };
}

type NativeChat = (id: string, body: unknown, res?: ServerResponse) => Promise<{ status: number; json: unknown }>;

/** The native handler's work: validate, find or create the agent, one chat turn; given `res`, abort the turn if the client goes away. */
function nativeChat(): NativeChat {
  const EchoAgent = echoAgentClass();
  const agents = new Map<string, Agent>();
  return async (id, body, res) => {
    const message = (body as { message?: unknown } | undefined)?.message;
    if (typeof message !== 'string' || message === '') return { status: 400, json: { error: 'message required', code: 'missing_message' } };
    let agent = agents.get(id);
    if (agent === undefined) agents.set(id, (agent = new EchoAgent(id)));
    if (res === undefined) return { status: 200, json: { agent_id: id, response: await agent.chat(message) } };
    const controller = new AbortController();
    const onClose = (): void => {
      if (!res.writableFinished) controller.abort();
    };
    res.on('close', onClose);
    try {
      return { status: 200, json: { agent_id: id, response: await agent.chat(message, { signal: controller.signal }) } };
    } finally {
      res.off('close', onClose);
    }
  };
}

/** Koa mounts by the router's own prefix; Express and Fastify by theirs. */
function routerFor(prefix: string): AgentRouter {
  const registry = new AgentRegistry();
  registry.register('echo-[0-9]+', echoAgentClass());
  return new AgentRouter(registry, { prefix, pingInterval: 0 });
}

async function serve(framework: Framework): Promise<number> {
  const plain = nativeChat();
  const aborting = nativeChat();
  if (framework.startsWith('express')) {
    const express = (await import(framework)).default;
    const app = express();
    app.use(express.json());
    app.post('/native/:id/chat', (req: any, res: any, next: any) => {
      plain(req.params.id, req.body).then(({ status, json }) => res.status(status).json(json), next);
    });
    app.post('/abort/:id/chat', (req: any, res: any, next: any) => {
      aborting(req.params.id, req.body, res).then(({ status, json }) => res.status(status).json(json), next);
    });
    app.use('/api', toExpress(routerFor('')));
    return listenOn(app);
  }
  if (framework.startsWith('koa')) {
    const Koa = (await import(framework)).default;
    const { bodyParser } = await import('@koa/bodyparser');
    const app = new Koa();
    app.use(bodyParser());
    const route = /^\/(native|abort)\/([^/]+)\/chat$/;
    app.use(async (ctx: any, next: () => Promise<unknown>) => {
      const match = ctx.method === 'POST' ? route.exec(ctx.path) : null;
      if (match === null) return next();
      const id = match[2] as string;
      const { status, json } = match[1] === 'native' ? await plain(id, ctx.request.body) : await aborting(id, ctx.request.body, ctx.res);
      ctx.status = status;
      ctx.body = json;
    });
    app.use(toKoa(routerFor('/api')));
    return listenOn(app.callback());
  }
  const fastify = (await import(framework)).default;
  const app = fastify();
  app.post('/native/:id/chat', async (request: any, reply: any) => {
    const { status, json } = await plain(request.params.id, request.body);
    return reply.code(status).send(json);
  });
  app.post('/abort/:id/chat', async (request: any, reply: any) => {
    const { status, json } = await aborting(request.params.id, request.body, reply.raw);
    return reply.code(status).send(json);
  });
  await app.register(toFastify(routerFor('')), { prefix: '/api' });
  await app.listen({ port: 0, host: '127.0.0.1' });
  return app.server.address().port;
}

async function listenOn(listener: RequestListener<typeof IncomingMessage, typeof ServerResponse>): Promise<number> {
  const http = await import('node:http');
  const server = http.createServer(listener);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as import('node:net').AddressInfo).port;
}

// ---- driver (this process) ----

interface Run {
  requestsPerSecond: number;
  requests: number;
  failures: number;
}

async function load(port: number, base: string, seconds: number, connections: number): Promise<Run> {
  const autocannon = (await import('autocannon')).default;
  let next = 0;
  const result = await autocannon({
    url: `http://127.0.0.1:${port}`,
    connections,
    duration: seconds,
    requests: [
      {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: BODY,
        setupRequest: (request: Record<string, unknown>) => ({ ...request, path: `${base}/echo-${next++ % IDS}/chat` }),
      },
    ],
  });
  return { requestsPerSecond: result.requests.average, requests: result.requests.total, failures: result.non2xx + result.errors };
}

async function sameReplies(port: number): Promise<void> {
  const replies: string[] = [];
  for (const [, base] of CONTENDERS) {
    const res = await fetch(`http://127.0.0.1:${port}${base}/echo-1/chat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: BODY });
    replies.push(`${res.status} ${await res.text()}`);
  }
  if (new Set(replies).size !== 1) throw new Error(`the routes answer differently:\n  ${replies.join('\n  ')}`);
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};

interface Samples {
  rps: number[];
  cpu: number[];
}

async function bench(framework: Framework, rounds: number, seconds: number, connections: number): Promise<{ samples: Samples[]; failures: number }> {
  const child = fork(fileURLToPath(import.meta.url), ['--serve', framework], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  try {
    const port = await new Promise<number>((resolve, reject) => {
      child.once('message', (message) => resolve((message as { port: number }).port));
      child.once('exit', (code) => reject(new Error(`${framework} server exited with ${code}`)));
    });
    const cpuNow = (): Promise<number> =>
      new Promise((resolve) => {
        child.once('message', (message) => {
          const { user, system } = (message as { cpu: NodeJS.CpuUsage }).cpu;
          resolve(user + system);
        });
        child.send('cpu');
      });
    await sameReplies(port);
    for (const [, base] of CONTENDERS) await load(port, base, 1, connections); // warm-up, not counted
    const samples: Samples[] = CONTENDERS.map(() => ({ rps: [], cpu: [] }));
    let failures = 0;
    for (let round = 0; round < rounds; round++) {
      for (const [i, [, base]] of CONTENDERS.entries()) {
        const before = await cpuNow();
        const run = await load(port, base, seconds, connections);
        const cpu = (await cpuNow()) - before;
        failures += run.failures;
        (samples[i] as Samples).rps.push(run.requestsPerSecond);
        (samples[i] as Samples).cpu.push(cpu / run.requests);
      }
    }
    return { samples, failures };
  } finally {
    child.kill();
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      serve: { type: 'string' },
      rounds: { type: 'string', default: '5' },
      duration: { type: 'string', default: '3' },
      connections: { type: 'string', default: '10' },
      only: { type: 'string' },
    },
  });
  if (values.serve !== undefined) {
    const port = await serve(values.serve as Framework);
    // Run by hand (e.g. under --cpu-prof), it says where it listens.
    if (process.send === undefined) console.log(`listening on http://127.0.0.1:${port}`);
    process.send?.({ port });
    // The driver asks for this process's CPU time around each run.
    process.on('message', () => process.send?.({ cpu: process.cpuUsage() }));
    return;
  }
  const rounds = Number(values.rounds);
  const seconds = Number(values.duration);
  const connections = Number(values.connections);
  const only = values.only?.split(',') ?? [...FRAMEWORKS];
  console.log(`node ${process.version}, ${rounds} rounds x ${seconds} s per contender, ${connections} connections, POST {id}/chat over ${IDS} echo agents`);
  console.log('medians       req/s: native  +abort  router  router/native  router/+abort   CPU us/req: native  +abort  router  native/router  +abort/router');
  for (const framework of FRAMEWORKS.filter((name) => only.includes(name))) {
    const { samples, failures } = await bench(framework, rounds, seconds, connections);
    const [rps0, rps1, rps2] = samples.map((s) => median(s.rps)) as [number, number, number];
    const [cpu0, cpu1, cpu2] = samples.map((s) => median(s.cpu)) as [number, number, number];
    const n = (value: number, width: number): string => value.toFixed(0).padStart(width);
    const x = (value: number, width: number): string => `${value.toFixed(2)}x`.padStart(width);
    console.log(
      `${framework.padEnd(9)}  ${n(rps0, 13)}  ${n(rps1, 6)}  ${n(rps2, 6)}  ${x(rps2 / rps0, 13)}  ${x(rps2 / rps1, 13)}` +
        `  ${n(cpu0, 18)}  ${n(cpu1, 6)}  ${n(cpu2, 6)}  ${x(cpu0 / cpu2, 13)}  ${x(cpu1 / cpu2, 13)}` +
        (failures > 0 ? `  (${failures} non-2xx or errors!)` : ''),
    );
  }
}

await main();
