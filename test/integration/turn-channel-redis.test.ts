// The Redis TurnChannel over a real Redis, through node-redis and ioredis: two storages stand for two processes.
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { redisStorage } from '../../src/storage/redis.ts';
import type { TurnChannel } from '../../src/storage/turn-channel.ts';
import { createClient } from 'redis';
import { connectRedis, REDIS_URL, runTag } from '../helpers/storage-backends.ts';
import { echoOn, serveAgents } from '../helpers/agents.ts';
import { postJson } from '../helpers/http.ts';
import { cancelReachesHolder, logIsShared } from '../helpers/turn-channel-contract.ts';

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

for (const flavor of ['node-redis', 'ioredis'] as const) {
  test(`redis turn channel (${flavor}): a log written by one process is read and followed by another, trimmed and ended`, async (t) => {
    const { a, b } = await twoProcesses(t, flavor);
    await logIsShared(a, b);
  });

  test(`redis turn channel (${flavor}): cancel reaches the process holding the turn, and busy follows the agent's lock`, async (t) => {
    const { a, b } = await twoProcesses(t, flavor);
    await cancelReachesHolder(a, b);
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
