// The Redis TurnChannel over a real Redis, through node-redis and ioredis: two storages stand for two processes.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test, type TestContext } from 'node:test';
import { redisStorage } from '../../src/storage/redis.ts';
import type { TurnChannel } from '../../src/storage/turn-channel.ts';
import { createClient } from 'redis';
import { connectRedis, REDIS_URL, runTag } from '../helpers/storage-backends.ts';
import { echoOn, serveAgents } from '../helpers/agents.ts';
import { postJson } from '../helpers/http.ts';

async function twoProcesses(t: TestContext, flavor: 'node-redis' | 'ioredis') {
  const prefix = `ar-test:${runTag()}:`;
  const opened = await Promise.all([connectRedis(flavor), connectRedis(flavor)]);
  const storages = opened.map(({ client }) => redisStorage(client, { prefix, shareTurns: true }));
  t.after(async () => {
    await Promise.all(storages.map((storage) => storage.close()));
    await Promise.all(opened.map((open) => open.close()));
  });
  const channel = (storage: (typeof storages)[number]): TurnChannel & { close(): Promise<void> } => {
    assert.ok(storage.turns, 'shareTurns: true gives the storage a turn channel');
    return storage.turns as TurnChannel & { close(): Promise<void> };
  };
  return { a: { turns: channel(storages[0]!), lock: (id: string) => storages[0]!.lock(id) }, b: { turns: channel(storages[1]!), lock: (id: string) => storages[1]!.lock(id) } };
}

/** Follows `turnId` (once subscribed, so no write is missed); `woken` resolves at the first wake. */
async function following(channel: TurnChannel, turnId: string): Promise<{ woken: Promise<void>; stop: () => void }> {
  let wake!: () => void;
  const woken = new Promise<void>((resolve) => (wake = resolve));
  const stop = await channel.follow(turnId, () => wake());
  return { woken, stop };
}

for (const flavor of ['node-redis', 'ioredis'] as const) {
  test(`redis turn channel (${flavor}): a log written by one process is read and followed by another, trimmed and ended`, async (t) => {
    const { a, b } = await twoProcesses(t, flavor);
    const turnId = randomUUID();
    assert.equal(await b.turns.read(turnId, 0), undefined, 'never written');
    await a.turns.append({ agentId: 'bot', turnId, from: 1, entries: ['"one"', '" two"'], first: 1, ended: false, ttlSeconds: 300 });
    assert.deepEqual(await b.turns.read(turnId, 0), { agentId: 'bot', first: 1, from: 1, entries: ['"one"', '" two"'], ended: false });
    assert.deepEqual(await b.turns.read(turnId, 1), { agentId: 'bot', first: 1, from: 2, entries: ['" two"'], ended: false });
    const follower = await following(b.turns, turnId);
    await a.turns.append({ agentId: 'bot', turnId, from: 3, entries: ['" three"', '{"finished":{}}'], first: 3, ended: true, ttlSeconds: 60 });
    await follower.woken;
    follower.stop();
    assert.deepEqual(await b.turns.read(turnId, 0), { agentId: 'bot', first: 3, from: 3, entries: ['" three"', '{"finished":{}}'], ended: true }, 'the entries before first are gone');
    assert.deepEqual(await b.turns.read(turnId, 4), { agentId: 'bot', first: 3, from: 5, entries: [], ended: true });
  });

  test(`redis turn channel (${flavor}): cancel reaches the process holding the turn, and busy follows the agent's lock`, async (t) => {
    const { a, b } = await twoProcesses(t, flavor);
    const asked: unknown[] = [];
    const stop = await b.turns.onCancel((agentId, request) => {
      asked.push([agentId, request]);
      return 'turnId' in request && request.turnId === 't-1' ? ['t-1'] : [];
    });
    assert.deepEqual(await a.turns.cancel('bot', { turnId: 't-1' }, 5000), ['t-1']);
    assert.deepEqual(await a.turns.cancel('bot', { turnId: 't-2' }, 5000), [], 'every listener answered: nothing held t-2');
    assert.deepEqual(asked, [['bot', { turnId: 't-1' }], ['bot', { turnId: 't-2' }]]);
    stop();
    assert.deepEqual(await a.turns.cancel('bot', { all: true }, 5000), []);
    assert.equal(asked.length, 2, 'a stopped handler hears nothing');
    assert.equal(await a.turns.busy('bot'), false);
    const unlock = await b.lock('bot');
    assert.equal(await a.turns.busy('bot'), true);
    await unlock();
    assert.equal(await a.turns.busy('bot'), false);
  });
}

test('a Redis user allowed its keys but not its channels: turns are served, and the refused subscription is logged once, not at every turn', async (t) => {
  const prefix = `ar-test:${runTag()}:acl:`;
  const user = `ar_acl_${runTag()}`;
  const admin = createClient({ url: REDIS_URL });
  await admin.connect();
  // Keys under the prefix only: Redis 7 gives a new user no pub/sub channel.
  await admin.sendCommand(['ACL', 'SETUSER', user, 'on', '>pw', `~${prefix}*`, 'resetchannels', '+@all']);
  const client = createClient({ url: `redis://${user}:pw@127.0.0.1:6379` });
  client.on('error', () => undefined);
  await client.connect();
  const storage = redisStorage(client, { prefix, shareTurns: true });
  t.after(async () => {
    await storage.close();
    await client.close();
    const keys = await admin.keys(`${prefix}*`);
    if (keys.length > 0) await admin.del(keys);
    await admin.sendCommand(['ACL', 'DELUSER', user]);
    await admin.close();
  });
  const logged: string[] = [];
  const url = await serveAgents(t, echoOn(storage), { logger: { error: (message: unknown) => logged.push(String(message)) } });
  for (let i = 0; i < 5; i++) {
    const reply = await postJson(`${url}/acl-bot/chat`, { message: `turn ${i}` });
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
  }
  assert.equal(logged.length, 1, logged.join('\n'));
  assert.match(logged[0] as string, /could not listen for cancel requests from other processes; a turn tries again 30 s from now/);
});
