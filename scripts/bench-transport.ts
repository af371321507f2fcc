/**
 * What one HTTPTransport hop costs. Not a test: a measurement to read.
 *
 *   npx tsx scripts/bench-transport.ts [requests=2000] [streams=200]
 *
 * Three processes on loopback, so no two parties share an event loop:
 *   B       a child: AgentRouter over a registry whose agents answer at once
 *           (a scripted model), or, for "hold", send one chunk and wait;
 *   client  a child: node:http with one keep-alive connection per target;
 *   A       this process: AgentRouter whose registry sends `remote-.*` to B
 *           through an HTTPTransport. Only A lives here, so heap measured here
 *           is A's.
 *
 * Latency: the client sends JSON chats one at a time, rotating over the
 * contenders (so drift hits all alike): direct to B; through a bare node:http
 * pass-through proxy and a bare fetch pass-through (both in A's process: the
 * floor of any one hop, and of any fetch-based one); and through AgentRouter +
 * HTTPTransport. It reports each p50, and the added latency as the difference
 * of p50s and as the p50 of per-round differences. Loopback on a shared 2-core
 * machine is noisy: read the medians, rerun for a second look.
 *
 * Heap: the client opens N streams through A and reads the first chunk of
 * each (B then holds them open), five times over, all kept open; after a forced
 * GC each time, the growth of A's heap per round, divided by N (median of the
 * last four rounds), is the heap per proxied open stream:
 * the incoming request and response, the router's bookkeeping, the SSE writer,
 * and the transport's fetch, its connection and body stream. The same is
 * measured for N streams opened with the transport alone (no router).
 * It ignores kernel socket buffers and memory outside the V8 heap (reported
 * separately as "external").
 */
import { fork, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import v8 from 'node:v8';
import vm from 'node:vm';
import { Agent } from '../src/agent/agent.ts';
import { AgentRouter } from '../src/router/router.ts';
import { scriptedModel } from '../src/models/scripted.ts';
import { AgentRegistry } from '../src/registry/registry.ts';
import { MemoryStorage } from '../src/storage/memory.ts';
import { HTTPTransport } from '../src/transports/http.ts';

type Message = { type: string; [key: string]: unknown };
/** One latency contender: where the client sends its chats. */
type Target = { name: string; port: number; id: string };

async function listenOn(listener: http.RequestListener): Promise<{ server: http.Server; port: number }> {
  const server = http.createServer(listener);
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as AddressInfo).port };
}

async function serveB(): Promise<void> {
  const storage = new MemoryStorage();
  class Bot extends Agent {
    constructor(id: string) {
      super(id, {
        storage,
        model: scriptedModel(async function* ({ messages, signal }) {
          yield 'ok';
          if (messages.at(-1)?.content !== 'hold') return;
          await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
        }),
      });
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Bot);
  const { port } = await listenOn(new AgentRouter(registry, { prefix: '/agent', pingInterval: 0, logger: { error: () => {} } }).toRequestListener());
  process.send?.({ type: 'listening', port });
}

function runClient(): void {
  const held: http.ClientRequest[] = [];
  const request = (agent: http.Agent, port: number, path: string, body: string, accept: string) =>
    http.request({ host: '127.0.0.1', port, path, method: 'POST', agent, headers: { 'content-type': 'application/json', accept, 'content-length': Buffer.byteLength(body) } });
  const chat = (agent: http.Agent, port: number, id: string): Promise<number> =>
    new Promise((resolve, reject) => {
      const start = process.hrtime.bigint();
      const req = request(agent, port, `/agent/${id}/chat`, '{"message":"ping"}', 'application/json');
      req.on('response', (res) => {
        res.resume();
        res.on('end', () => resolve(Number(process.hrtime.bigint() - start) / 1000));
      });
      req.on('error', reject);
      req.end('{"message":"ping"}');
    });
  process.on('message', async (message: Message) => {
    if (message.type === 'latency') {
      const { targets, n, warmup } = message as unknown as { targets: Target[]; n: number; warmup: number };
      const agents = targets.map(() => new http.Agent({ keepAlive: true, maxSockets: 1 }));
      const times: Record<string, number[]> = {};
      for (const target of targets) times[target.name] = [];
      for (let i = 0; i < warmup + n; i++) {
        // Rotate the order every round, so no contender always goes first.
        for (let k = 0; k < targets.length; k++) {
          const index = (i + k) % targets.length;
          const target = targets[index] as Target;
          const micros = await chat(agents[index] as http.Agent, target.port, target.id);
          if (i >= warmup) times[target.name]?.push(micros);
        }
      }
      for (const agent of agents) agent.destroy();
      process.send?.({ type: 'latency', times });
    } else if (message.type === 'open') {
      const { port, n, prefix } = message as unknown as { port: number; n: number; prefix: string };
      const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
      await Promise.all(Array.from({ length: n }, (_, i) => new Promise<void>((resolve, reject) => {
        const req = request(agent, port, `/agent/${prefix}-${i}/chat?stream=true`, '{"message":"hold"}', 'text/event-stream');
        req.on('response', (res) => res.once('data', () => resolve()));
        req.on('error', reject);
        req.end('{"message":"hold"}');
        held.push(req);
      })));
      process.send?.({ type: 'opened' });
    } else if (message.type === 'close') {
      for (const req of held.splice(0)) req.destroy();
      process.send?.({ type: 'closed' });
    } else if (message.type === 'exit') process.exit(0);
  });
  process.send?.({ type: 'ready' });
}

function child(name: string): ChildProcess {
  return fork(new URL(import.meta.url).pathname, [name], { execArgv: ['--import', 'tsx'], stdio: 'inherit' });
}

function reply(from: ChildProcess, type: string, send?: Message): Promise<Message> {
  return new Promise((resolve) => {
    const on = (message: Message): void => {
      if (message.type !== type) return;
      from.off('message', on);
      resolve(message);
    };
    from.on('message', on);
    if (send !== undefined) from.send(send);
  });
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((x, y) => x - y);
  return sorted[Math.floor(sorted.length / 2)] as number;
};

async function main(n: number, streams: number): Promise<void> {
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc') as () => void;
  const heap = (): { used: number; external: number } => {
    for (let i = 0; i < 3; i++) gc();
    const usage = process.memoryUsage();
    return { used: usage.heapUsed, external: usage.external + usage.arrayBuffers };
  };

  const b = child('b');
  const client = child('client');
  process.on('exit', () => {
    b.kill();
    client.kill();
  });
  const [{ port: bPort }] = (await Promise.all([reply(b, 'listening'), reply(client, 'ready')])) as unknown as [{ port: number }, Message];
  const transport = new HTTPTransport(`http://127.0.0.1:${bPort}/agent`, { maxConnections: 10_000 });
  const registry = new AgentRegistry();
  registry.register('remote-.*', transport);
  const { server, port: aPort } = await listenOn(new AgentRouter(registry, { prefix: '/agent', pingInterval: 0, logger: { error: () => {} } }).toRequestListener());
  // Two bare pass-through proxies, also in this process, as the floor of one
  // hop: what any node:http proxy costs, and what any fetch-based one does.
  const upstream = new http.Agent({ keepAlive: true });
  const { server: httpProxy, port: httpPort } = await listenOn((req, res) => {
    const up = http.request({ host: '127.0.0.1', port: bPort, path: req.url, method: req.method, headers: { 'content-type': 'application/json' }, agent: upstream }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, { 'content-type': 'application/json' });
      answer.pipe(res);
    });
    req.pipe(up);
  });
  const { server: fetchProxy, port: fetchPort } = await listenOn(async (req, res) => {
    let body = '';
    for await (const chunk of req) body += String(chunk);
    const answer = await fetch(`http://127.0.0.1:${bPort}${req.url ?? '/'}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const text = await answer.text();
    res.writeHead(answer.status, { 'content-type': 'application/json' });
    res.end(text);
  });

  const kb = (bytes: number): string => (bytes / 1024).toFixed(1);
  /**
   * Opens `count` more streams, five times over, keeping all open; the heap
   * growth per stream is the median over the last four rounds, so one-time
   * allocations (code, pools, caches) fall into the first round and a GC that
   * happens to free old garbage in one round does not decide the answer.
   */
  const slope = async (count: number, open: (count: number, round: number) => Promise<void>) => {
    await open(count, 0);
    let last = heap();
    const used: number[] = [];
    const external: number[] = [];
    for (let round = 1; round <= 4; round++) {
      await open(count, round);
      const now = heap();
      used.push((now.used - last.used) / count);
      external.push((now.external - last.external) / count);
      last = now;
    }
    return { used: median(used), external: median(external), rounds: used.map(kb).join(', ') };
  };

  console.log(`node ${process.version}, ${n} JSON chats per contender, rotating; ${streams} streams per heap round`);
  const targets: Target[] = [
    { name: 'direct to B', port: bPort, id: 'bench-direct' },
    { name: 'node:http pass-through', port: httpPort, id: 'bench-http' },
    { name: 'fetch pass-through', port: fetchPort, id: 'bench-fetch' },
    { name: 'AgentRouter + HTTPTransport', port: aPort, id: 'remote-bench' },
  ];
  const { times } = await reply(client, 'latency', { type: 'latency', targets, n, warmup: 300 }) as unknown as { times: Record<string, number[]> };
  const direct = times['direct to B'] as number[];
  for (const { name } of targets) {
    const own = times[name] as number[];
    const paired = median(own.map((value, i) => value - (direct[i] as number)));
    const added = name === 'direct to B' ? '' : `, added ${(median(own) - median(direct)).toFixed(0)} µs (p50 of paired differences ${paired.toFixed(0)} µs)`;
    console.log(`  ${name.padEnd(28)} p50 ${median(own).toFixed(0).padStart(5)} µs${added}`);
  }

  const through = await slope(streams, async (count, round) => {
    await reply(client, 'opened', { type: 'open', port: aPort, n: count, prefix: `remote-held-${round}` });
  });
  console.log(`heap per proxied open stream (router + transport, in A): ${kb(through.used)} KB, median of rounds [${through.rounds}] (external ${kb(through.external)} KB)`);
  await reply(client, 'closed', { type: 'close' });
  // Let A see those connections close before the next measurement starts.
  for (let i = 0; i < 100 && (await new Promise<number>((resolve) => server.getConnections((_, count) => resolve(count)))) > 0; i++) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }

  const opened: Array<{ controller: AbortController; iterator: AsyncIterator<string> }> = [];
  const alone = await slope(streams, async (count, round) => {
    opened.push(...(await Promise.all(Array.from({ length: count }, async (_, i) => {
      const controller = new AbortController();
      const iterator = transport.stream(`remote-alone-${round}-${i}`, 'hold', { signal: controller.signal })[Symbol.asyncIterator]();
      await iterator.next();
      return { controller, iterator }; // the iterator is part of what an open stream holds
    }))));
  });
  console.log(`heap per open stream, HTTPTransport alone: ${kb(alone.used)} KB, median of rounds [${alone.rounds}] (external ${kb(alone.external)} KB)`);
  for (const { controller } of opened) controller.abort();

  for (const each of [server, httpProxy, fetchProxy]) each.closeAllConnections();
  process.exit(0);
}

const role = process.argv[2];
if (role === 'b') await serveB();
else if (role === 'client') runClient();
else await main(Number(process.argv[2] ?? 2000), Number(process.argv[3] ?? 200));
