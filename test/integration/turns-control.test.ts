import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import pg from 'pg';
import { Agent } from '../../src/agent/agent.ts';
import { echoModel } from '../../src/models/echo.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { postgresStorage } from '../../src/storage/postgres.ts';
import type { Storage } from '../../src/storage/storage.ts';
import { listen } from '../helpers/listen.ts';
import { PG_CONFIG, runTag } from '../helpers/storage-backends.ts';
import { tcpProxy } from '../helpers/tcp-proxy.ts';
import { postJson, streamChat } from '../helpers/http.ts';
import { collectSSE } from '../helpers/sse.ts';
import { eventsOf, rejoinUrl, rest, serveWords, Steps, take } from '../helpers/turns-serve.ts';

const WORDS = ['one', ' two', ' three'];

/**
 * Two processes' storages on one Postgres schema with shareTurns: A's through the proxy on `portA` (which
 * the test makes hold or cut A's traffic), B's direct. Both are closed and the schema dropped after the test.
 */
function twoProcesses(t: TestContext, schema: string, portA: number): [Storage, Storage] {
  const poolA = new pg.Pool({ ...PG_CONFIG, port: portA, max: 3 });
  poolA.on('error', () => undefined); // the proxy may cut its connections
  const poolB = new pg.Pool({ ...PG_CONFIG, max: 3 });
  const storageA = postgresStorage(poolA, { schema, shareTurns: true });
  const storageB = postgresStorage(poolB, { schema, shareTurns: true });
  t.after(async () => {
    await storageA.close();
    await storageB.close();
    await poolA.end();
    await poolB.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await poolB.end();
  });
  return [storageA, storageB];
}

test('cancel: the running turn (no turn_id) ends its stream with cancelled, stores nothing, and the next turn starts at once', async (t) => {
  const steps = new Steps();
  const asked: string[] = [];
  const { url, storage } = await serveWords(t, WORDS, { authorize: (_req, { action }) => (asked.push(action), true) }, steps);
  const running = await streamChat(`${url}/bot/chat`, 'go', { query: '?stream=events' });
  const turnId = running.headers.get('turn-id');
  const queued = postJson(`${url}/bot/chat`, { message: 'next' });
  const cancelled = await postJson(`${url}/bot/cancel`, {});
  assert.equal(cancelled.status, 202);
  assert.deepEqual(cancelled.body, { agent_id: 'bot', turn_id: turnId, cancelled: true });
  const { events } = await collectSSE(running);
  const last = events.at(-1) as { event: string; data: string };
  assert.equal(last.event, 'turn.failed');
  assert.equal(JSON.parse(last.data).code, 'cancelled');
  steps.release();
  const next = await queued;
  assert.equal(next.status, 200);
  assert.equal(next.body.response, WORDS.join(''));
  const stored = await storage.load('bot');
  assert.deepEqual(stored?.messages.map((m) => m.content), ['next', WORDS.join('')], 'the cancelled turn left no trace');
  assert.ok(asked.includes('cancel'));
});

test('cancel: a queued turn by its turn_id; 404 no_running_turn for an idle agent or an unknown id', async (t) => {
  const steps = new Steps();
  const { url } = await serveWords(t, WORDS, {}, steps);
  const running = streamChat(`${url}/bot/chat`, 'first');
  const queued = await streamChat(`${url}/bot/chat`, 'second');
  const queuedId = queued.headers.get('turn-id');
  const unknown = await postJson(`${url}/bot/cancel`, { turn_id: 'nope' });
  assert.deepEqual([unknown.status, unknown.body.code], [404, 'no_running_turn']);
  const cancelled = await postJson(`${url}/bot/cancel`, { turn_id: queuedId });
  assert.deepEqual(cancelled.body, { agent_id: 'bot', turn_id: queuedId, cancelled: true });
  const { events } = await collectSSE(queued);
  assert.deepEqual(events.map((e) => e.event), ['error']);
  assert.equal(JSON.parse((events[0] as { data: string }).data).code, 'cancelled');
  steps.release();
  assert.equal((await collectSSE(await running)).text, WORDS.join(''), 'the running turn is untouched');
  const idle = await postJson(`${url}/bot/cancel`, {});
  assert.deepEqual([idle.status, idle.body.code], [404, 'no_running_turn']);
});

test('cancel: a turn already storing its result is not reported cancelled (404 no_running_turn); it completes and stays stored (Postgres)', async (t) => {
  const schema = `ar_test_${runTag()}_committing`;
  let release: (() => void) | undefined;
  let committing!: () => void;
  const held = new Promise<void>((resolve) => (committing = resolve));
  // The commit statement (the agent's row and its messages, "WITH a AS (...)") is kept from Postgres until the test lets it go.
  const port = await tcpProxy(t, PG_CONFIG.port, {
    toServer: (bytes, link) => {
      if (release !== undefined || !bytes.includes('WITH a AS (')) return true;
      release = () => link.send(bytes);
      committing();
      return false;
    },
  });
  const pool = new pg.Pool({ ...PG_CONFIG, port, max: 2 });
  pool.on('error', () => undefined); // its connections are cut when the proxy closes, before pool.end()
  const admin = new pg.Pool({ ...PG_CONFIG, max: 1 });
  const storage = postgresStorage(pool, { schema });
  t.after(async () => {
    await pool.end();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });
  class Bot extends Agent {
    constructor(id: string) {
      super(id, { model: echoModel(), storage });
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Bot);
  const { url, close } = await listen(new AgentRouter(registry).toRequestListener());
  t.after(close);

  const chat = postJson(`${url}/bot/chat`, { message: 'keep me' });
  await held;
  const late = await postJson(`${url}/bot/cancel`, {});
  assert.deepEqual([late.status, late.body.code], [404, 'no_running_turn']);
  assert.match(late.body.error as string, /can no longer be cancelled: it has stored its result, or is storing it/);
  (release as () => void)();
  const reply = await chat;
  assert.deepEqual([reply.status, reply.body.response], [200, 'keep me']);
  assert.deepEqual((await storage.load('bot'))?.messages.map((m) => m.content), ['keep me', 'keep me']);
});

test('cancel and rejoin for an agent not live here, with every live agent busy: 404 as for any idle agent, not 429, and no agent is made live', async (t) => {
  const steps = new Steps();
  const { url, router } = await serveWords(t, WORDS, { maxAgents: 1 }, steps);
  const running = await streamChat(`${url}/busy/chat`, 'go');
  const cancel = await postJson(`${url}/other/cancel`, {});
  assert.deepEqual([cancel.status, cancel.body.code], [404, 'no_running_turn']);
  const rejoin = await fetch(`${url}/other/turns/nope/events`);
  assert.equal(rejoin.status, 404);
  assert.equal(((await rejoin.json()) as { code: string }).code, 'turn_not_found');
  assert.deepEqual(router.pool?.list().map((agent) => agent.id), ['busy']);
  steps.release();
  assert.equal((await collectSSE(running)).events.at(-1)?.data, '[DONE]');
});

test("rejoin through another process whose copy of the turn lags behind what the client got: the events after the client's last, each once (Postgres, shareTurns)", async (t) => {
  const schema = `ar_test_${runTag()}_lagging`;
  const held: Array<() => void> = [];
  let holding = false;
  // Process A's copies of its log reach Postgres only when the test lets them: its client is ahead of the storage.
  const port = await tcpProxy(t, PG_CONFIG.port, {
    toServer: (bytes, link) => {
      if (!holding || !bytes.includes('WITH turn AS (')) return true;
      held.push(() => link.send(bytes));
      return false;
    },
  });
  const [storageA, storageB] = twoProcesses(t, schema, port);
  const steps = new Steps();
  // A CRLF split across the events the client has and the next: the plain stream must read the lagging ones too.
  const words = ['one', ' two\r', '\nthree', ' four'];
  const a = await serveWords(t, words, {}, steps, storageA);
  const b = await serveWords(t, words, {}, steps, storageB);
  const live = await streamChat(`${a.url}/bot/chat`, 'go');
  const turnId = live.headers.get('turn-id') as string;
  const events = eventsOf(live);
  steps.release(1);
  const [first] = await take(events, 1);
  // Event 1 is in the storage (B can replay it), then A's copies are held.
  const early = eventsOf(await fetch(rejoinUrl(b.url, 'bot', turnId)));
  assert.deepEqual(await take(early, 1), [first]);
  await early.return(undefined);
  holding = true;
  steps.release(1);
  const [second] = await take(events, 1);
  assert.equal(second?.data, ' two\n');
  const rejoined = await fetch(rejoinUrl(b.url, 'bot', turnId), { headers: { 'last-event-id': (second as { id: string }).id } });
  assert.equal(rejoined.status, 200);
  holding = false;
  for (const send of held) send();
  steps.release();
  const missing = await rest(events);
  assert.deepEqual(missing.map((event) => [event.id, event.data]), [[`${turnId}:3`, 'three'], [`${turnId}:4`, ' four'], [`${turnId}:5`, '[DONE]']]);
  assert.deepEqual((await collectSSE(rejoined)).events, missing);
});

test('rejoin through another process of a turn whose process stopped: the rejoin ends with turn_timeout once the turn has logged nothing for turnTimeout (Postgres, shareTurns)', async (t) => {
  const schema = `ar_test_${runTag()}_stopped`;
  const links = new Set<{ cut(): void }>();
  let gone = false;
  // Process A's storage, until A "stops": then every connection is cut and no new one answers.
  const port = await tcpProxy(t, PG_CONFIG.port, {
    accept: () => (gone ? 'cut' : true),
    toServer: (_bytes, link) => (links.add(link), true),
  });
  const [storageA, storageB] = twoProcesses(t, schema, port);
  const steps = new Steps();
  const a = await serveWords(t, ['one', ' two'], { turnTimeout: 1 }, steps, storageA);
  const b = await serveWords(t, ['one', ' two'], { turnTimeout: 1 }, steps, storageB);
  const live = await streamChat(`${a.url}/bot/chat`, 'go');
  const turnId = live.headers.get('turn-id') as string;
  const events = eventsOf(live);
  steps.release(1);
  await take(events, 1);
  const rejoined = eventsOf(await fetch(rejoinUrl(b.url, 'bot', turnId)));
  assert.deepEqual((await take(rejoined, 1)).map((event) => event.data), ['one']);
  gone = true;
  for (const link of links) link.cut();
  const [last, ...more] = await rest(rejoined);
  assert.deepEqual(more, []);
  assert.equal(last?.event, 'error');
  assert.deepEqual(JSON.parse(last?.data as string), {
    error: `Turn "${turnId}" has logged nothing for 1 s (turnTimeout): the process running it stopped, or lost its storage`,
    code: 'turn_timeout',
  });
});
