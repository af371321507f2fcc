/**
 * Turn control across three AgentServer processes sharing one storage: a
 * turn started on one is rejoined through another (its missing events, then
 * the live tail), cancelled through a third, refused and interrupted from
 * the others, and rejoined after its end. Each backend is one entry below.
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { readSSE } from '../../src/sse/parser.ts';
import pg from 'pg';
import { postgresStorage } from '../../src/storage/postgres.ts';
import { redisStorage } from '../../src/storage/redis.ts';
import type { Storage } from '../../src/storage/storage.ts';
import { connectRedis, PG_CONFIG, runTag } from '../helpers/storage-backends.ts';
import { post, startServerChild } from '../helpers/storage-e2e.ts';
import type { ChildConfig } from '../helpers/storage-server-child.ts';
import { rest, take } from '../helpers/turns-serve.ts';

interface Backend {
  name: string;
  config: () => ChildConfig;
  open: (t: TestContext, config: ChildConfig) => Promise<Storage>;
}

const redis = (flavor: 'node-redis' | 'ioredis'): Backend => ({
  name: flavor,
  config: () => ({ backend: flavor, prefix: `ar-test:${runTag()}:`, shareTurns: true }),
  open: async (t, config) => {
    const { client, close } = await connectRedis(flavor);
    const storage = redisStorage(client, { prefix: config.prefix });
    t.after(async () => {
      await storage.close();
      await close();
    });
    return storage;
  },
});

const postgres: Backend = {
  name: 'postgres',
  config: () => ({ backend: 'postgres', schema: `ar_turns_${runTag()}`, shareTurns: true }),
  open: async (t, config) => {
    const pool = new pg.Pool({ ...PG_CONFIG, max: 4 });
    const storage = postgresStorage(pool, { schema: config.schema });
    t.after(async () => {
      await storage.close();
      await pool.query(`DROP SCHEMA IF EXISTS "${config.schema}" CASCADE`);
      await pool.end();
    });
    await storage.head('create-tables-first'); // made here, before three processes race to make them
    return storage;
  },
};

const BACKENDS: Backend[] = [redis('node-redis'), redis('ioredis'), postgres];

function chatStream(url: string, id: string, query: string): Promise<Response> {
  return fetch(`${url}/agent/${id}/chat${query}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ message: 'go' }) });
}

for (const backend of BACKENDS) {
  test(`three processes on ${backend.name}: rejoin through another process, then cancel through a third; nothing stored`, async (t) => {
    const config = backend.config();
    const storage = await backend.open(t, config);
    const [one, two, three] = await Promise.all([startServerChild(t, config), startServerChild(t, config), startServerChild(t, config)]);
    const id = 'slow-cancel';
    const started = await chatStream(one!.url, id, '?stream=events');
    const turnId = started.headers.get('turn-id') as string;
    const live = readSSE(started.body as ReadableStream<Uint8Array>);
    const first = await take(live, 3); // turn.started, w1, w2
    assert.deepEqual(first.map((e) => e.id), [`${turnId}:1`, `${turnId}:2`, `${turnId}:3`]);

    // Through process two, after the second event: exactly the events from the third on.
    const rejoined = await fetch(`${two!.url}/agent/${id}/turns/${turnId}/events?stream=events`, { headers: { 'last-event-id': `${turnId}:2` } });
    assert.equal(rejoined.status, 200);
    const followed = readSSE(rejoined.body as ReadableStream<Uint8Array>);
    const next = await take(followed, 3);
    assert.deepEqual(next.map((e) => [e.id, JSON.parse(e.data).text]), [[`${turnId}:3`, 'w2 '], [`${turnId}:4`, 'w3 '], [`${turnId}:5`, 'w4 ']]);

    const cancelled = await post(`${three!.url}/agent/${id}/cancel`, { turn_id: turnId });
    assert.equal(cancelled.status, 202, JSON.stringify(cancelled.body));
    assert.deepEqual(cancelled.body, { agent_id: id, turn_id: turnId, cancelled: true });

    const endLive = (await rest(live)).at(-1);
    assert.equal(endLive?.event, 'turn.failed');
    assert.equal(JSON.parse(endLive?.data ?? '{}').code, 'cancelled');
    const tail = await rest(followed);
    const seqs = [...next, ...tail].map((e) => Number(e.id?.split(':')[1]));
    assert.deepEqual(seqs, seqs.map((_, i) => i + 3), 'the rejoined stream has each event once, in order');
    assert.equal(tail.at(-1)?.event, 'turn.failed');
    assert.equal(JSON.parse(tail.at(-1)?.data ?? '{}').code, 'cancelled');
    assert.equal(await storage.load(id), undefined, 'the cancelled turn stored nothing');

    // A cancel with nothing running anywhere.
    const none = await post(`${two!.url}/agent/${id}/cancel`, {});
    assert.deepEqual([none.status, none.body['code']], [404, 'no_running_turn']);
  });

  test(`three processes on ${backend.name}: reject and interrupt see a turn running in another process`, async (t) => {
    const config = backend.config();
    const storage = await backend.open(t, config);
    const [one, two, three] = await Promise.all([startServerChild(t, config), startServerChild(t, config), startServerChild(t, config)]);
    const id = 'slow-busy';
    const running = await chatStream(one!.url, id, '?stream=true');
    const live = readSSE(running.body as ReadableStream<Uint8Array>);
    assert.equal((await take(live, 1))[0]?.data, 'w1 ', 'the turn runs');

    const refused = await fetch(`${two!.url}/agent/${id}/chat?when_busy=reject`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"message":"no"}' });
    assert.equal(refused.status, 409);
    assert.equal(((await refused.json()) as { code: string }).code, 'agent_busy');
    assert.ok(refused.headers.get('retry-after'));

    const interrupting = await post(`${three!.url}/agent/${id}/chat?when_busy=interrupt`, { message: 'instead' });
    const endLive = (await rest(live)).at(-1);
    assert.equal(endLive?.event, 'error');
    assert.equal(JSON.parse(endLive?.data ?? '{}').code, 'cancelled');
    assert.equal(interrupting.status, 200, JSON.stringify(interrupting.body));
    const record = await storage.load(id);
    assert.deepEqual(record?.messages.map((m) => m.content), ['instead', interrupting.body['response']], 'only the interrupting turn was stored');
  });

  test(`three processes on ${backend.name}: a turn is rejoined through another process as soon as its Turn-Id arrives, before its first event`, async (t) => {
    const config = backend.config();
    await backend.open(t, config);
    const [one, two] = await Promise.all([startServerChild(t, config), startServerChild(t, config)]);
    const id = 'slow-early';
    // The slow model's first word comes 100 ms in: nothing of the turn has been logged yet.
    const started = await chatStream(one!.url, id, '?stream=true');
    const turnId = started.headers.get('turn-id') as string;
    const rejoined = await fetch(`${two!.url}/agent/${id}/turns/${turnId}/events`);
    assert.equal(rejoined.status, 200, rejoined.status === 200 ? '' : await rejoined.text());
    const followed = readSSE(rejoined.body as ReadableStream<Uint8Array>);
    const live = readSSE(started.body as ReadableStream<Uint8Array>);
    const firstLive = await take(live, 2);
    const firstFollowed = await take(followed, 2);
    assert.deepEqual(firstFollowed.map((e) => [e.id, e.data]), firstLive.map((e) => [e.id, e.data]));
    assert.deepEqual(firstLive.map((e) => [e.id, e.data]), [[`${turnId}:1`, 'w1 '], [`${turnId}:2`, 'w2 ']]);
    const cancelled = await post(`${one!.url}/agent/${id}/cancel`, { turn_id: turnId });
    assert.equal(cancelled.status, 202, JSON.stringify(cancelled.body));
    const liveTail = [...firstLive, ...(await rest(live))];
    const followedTail = [...firstFollowed, ...(await rest(followed))];
    assert.deepEqual(followedTail.map((e) => [e.event, e.id, e.data]), liveTail.map((e) => [e.event, e.id, e.data]), 'the rejoin saw every event the first client saw');
  });

  test(`three processes on ${backend.name}: a finished turn is rejoined in full through another process, plain and UI message stream`, async (t) => {
    const config = backend.config();
    await backend.open(t, config);
    const [one, two] = await Promise.all([startServerChild(t, config), startServerChild(t, config)]);
    const original = await chatStream(one!.url, 'echo-rejoin', '?stream=true');
    const turnId = original.headers.get('turn-id') as string;
    const first = await rest(readSSE(original.body as ReadableStream<Uint8Array>));
    const again = await fetch(`${two!.url}/agent/echo-rejoin/turns/${turnId}/events`);
    assert.equal(again.status, 200);
    const replay = await rest(readSSE(again.body as ReadableStream<Uint8Array>));
    assert.deepEqual(replay.map((e) => [e.event, e.id, e.data]), first.map((e) => [e.event, e.id, e.data]));
    const other = await fetch(`${two!.url}/agent/someone-else/turns/${turnId}/events`);
    assert.equal(other.status, 404, "another agent's turn id is unknown");

    // The AI SDK's UI message stream, replayed through the other process byte for byte.
    const ui = await chatStream(one!.url, 'echo-rejoin', '?stream=ui');
    const uiTurn = ui.headers.get('turn-id') as string;
    const uiFirst = await ui.text();
    const uiAgain = await fetch(`${two!.url}/agent/echo-rejoin/turns/${uiTurn}/events?stream=ui`);
    assert.equal(uiAgain.headers.get('x-vercel-ai-ui-message-stream'), 'v1');
    assert.equal(await uiAgain.text(), uiFirst);
  });
}
