import assert from 'node:assert/strict';
import http from 'node:http';
import { test } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { scriptedModel } from '../../src/models/scripted.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import type { AgentRecord, Storage, TurnCommit } from '../../src/storage/storage.ts';
import { mib, MiB, settledHeap } from '../helpers/fuzz-heap.ts';
import { runBounded, sendHttp } from '../helpers/fuzz-wire.ts';
import { listen } from '../helpers/listen.ts';

// The flood: 100,000 distinct ids. Over real keep-alive sockets that
// took 36.6 s (35 s of CPU, 2,700/s, client and server in one process) on this
// 2-core machine when nearly idle. It is bounded by FLOOD_SECONDS too, and
// FLOOD_COUNT=50000 (twice past the checkpoint below, far past the pool's
// MAX_AGENTS, which is what the heap check needs) is a quicker run.
const COUNT = Number(process.env['FLOOD_COUNT'] ?? 100_000);
const SECONDS = Number(process.env['FLOOD_SECONDS'] ?? 90);
const CONCURRENCY = 50;
const MAX_AGENTS = 20;
/**
 * The heap is measured well after the registry's id cache (10,000 ids) is full; past that point nothing may
 * grow with new ids. Under coverage V8 still settles about 1 MiB between 11,000 and 25,000 requests, and then no more.
 */
const CHECKPOINT = 25_000;
/**
 * Growth allowed from the checkpoint to the end. Measured +0.3 MiB, +0.5 MiB under coverage (whose heap ends at
 * 11.3 MiB after 100,000 requests and after 250,000); 15 bytes kept per id would add 1 MiB over the 75,000 after it.
 */
const HEAP_BOUND = 1 * MiB;

/** Echoes after a turn of the event loop, so turns on many agents overlap and the cap is reached (429). */
const yieldingEcho = scriptedModel(async function* ({ messages }) {
  await new Promise((resolve) => setImmediate(resolve));
  yield messages[messages.length - 1]?.content ?? '';
});

/** Keeps nothing: the heap then shows what the router, the pool and the registry keep, not what users asked to store. */
class ForgetfulStorage implements Storage {
  async load(): Promise<AgentRecord | undefined> {
    return undefined;
  }
  async commit(_agentId: string, turn: TurnCommit): Promise<number> {
    return turn.expectedVersion + 1;
  }
}

test(`flood: ${COUNT} distinct agent ids on a .* registry never make more than maxAgents live agents, and the heap stays flat`, async (t) => {
  const storage = new ForgetfulStorage();
  const logged: string[] = [];
  let live = 0;
  let maxLive = 0;
  const registry = new AgentRegistry();
  registry.register('.*', class Bot extends Agent {
    constructor(id: string) {
      super(id, { model: yieldingEcho, storage });
    }
  });
  const router = new AgentRouter(registry, {
    maxAgents: MAX_AGENTS,
    idleTimeout: 0,
    logger: { error: (message, error) => logged.push(`${message}: ${String(error)}`) },
    onCreate: () => {
      live++;
      maxLive = Math.max(maxLive, live);
    },
    onEvict: () => {
      live--;
    },
  });
  const pool = router.pool!;
  const { server, port, close } = await listen(router.toRequestListener());
  server.keepAliveTimeout = 60_000;
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  t.after(async () => {
    agent.destroy();
    await close();
  });

  const statuses = new Map<number, number>();
  let maxPool = 0;
  let checkpoint = 0;
  const body = Buffer.from(JSON.stringify({ message: 'hello flood' }));
  const started = Date.now();
  const cpu = process.cpuUsage();
  const ids = (function* () {
    for (let i = 0; i < COUNT; i++) yield `flood-${i}-${(i * 2654435761) % 1e9}`;
  })();
  const sent = await runBounded(ids, CONCURRENCY, started + SECONDS * 1000, async (id, index) => {
    const reply = await sendHttp(agent, port, {
      method: 'POST',
      path: `/${id}/chat`,
      headers: { 'content-type': 'application/json' },
      body,
      cutAfterHeaders: false,
    }, 15_000);
    statuses.set(reply.status, (statuses.get(reply.status) ?? 0) + 1);
    maxPool = Math.max(maxPool, pool.size);
    if (reply.status === 200) assert.equal(JSON.parse(reply.body).response, 'hello flood');
    else if (reply.status === 429) assert.equal(JSON.parse(reply.body).code, 'too_many_agents');
    else assert.fail(`${id}: status ${reply.status} ${reply.body}`);
    if (index === CHECKPOINT) checkpoint = await settledHeap();
  });
  const elapsed = (Date.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  const cpuSeconds = (used.user + used.system) / 1e6;
  const end = await settledHeap();

  const summary = [...statuses].map(([status, n]) => `${status}: ${n}`).join(', ');
  console.log(`flood: ${sent} requests in ${elapsed.toFixed(1)} s, ${cpuSeconds.toFixed(1)} s of CPU (${Math.round(sent / elapsed)}/s), ${summary}; live agents at most ${maxLive}, pool size at most ${maxPool}`);
  console.log(`flood: heap at request ${CHECKPOINT} ${mib(checkpoint)}, at the end ${mib(end)} (${end >= checkpoint ? '+' : ''}${mib(end - checkpoint)})`);
  if (sent < COUNT) console.log(`flood: WARNING the ${SECONDS} s bound stopped the flood at ${sent} of ${COUNT}`);

  assert.deepEqual(logged, [], 'nothing failed in the server');
  assert.ok(maxLive <= MAX_AGENTS, `${maxLive} live agents at once; the cap is ${MAX_AGENTS}`);
  assert.ok(maxPool <= MAX_AGENTS);
  assert.equal(pool.size, Math.min(MAX_AGENTS, sent), 'after the flood the pool holds at most maxAgents (idle) agents');
  assert.equal(live, pool.size, 'every agent the pool dropped was reported');
  assert.equal((statuses.get(200) ?? 0) + (statuses.get(429) ?? 0), sent, 'every answer was 200 or 429');
  if (sent > CHECKPOINT) assert.ok(end - checkpoint < HEAP_BOUND, `heap grew ${mib(end - checkpoint)} after request ${CHECKPOINT} (bound ${mib(HEAP_BOUND)})`);
});
