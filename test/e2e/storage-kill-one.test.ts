/**
 * One of three AgentServer processes sharing a storage is killed (SIGKILL)
 * in the middle of turns while the other two go on serving the same agent
 * ids. Every turn acknowledged to a client is stored exactly once, whole,
 * and nothing else is but the killed process's turns in flight; every id is
 * served again by the survivors (on Redis once the killed holder's lease,
 * 2 s here, ran out; on Postgres and on FileStorage at once).
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import type { TestContext } from 'node:test';
import pg from 'pg';
import { Redis } from 'ioredis';
import { FileStorage } from '../../src/storage/file.ts';
import { postgresStorage } from '../../src/storage/postgres.ts';
import { redisStorage } from '../../src/storage/redis.ts';
import type { Storage } from '../../src/storage/storage.ts';
import { PG_CONFIG, REDIS_URL, runTag } from '../helpers/storage-backends.ts';
import { post, startServerChild } from '../helpers/storage-e2e.ts';
import type { ChildConfig } from '../helpers/storage-server-child.ts';

const IDS = ['kill-a', 'kill-b', 'kill-c', 'kill-d'];

async function killOneOfThree(t: TestContext, config: ChildConfig, storage: Storage): Promise<void> {
  const children = await Promise.all([0, 1, 2].map(() => startServerChild(t, config)));
  const acked = new Map<string, string[]>(IDS.map((id) => [id, []]));
  const inFlight = new Map<string, string[]>(IDS.map((id) => [id, []]));
  const afterKill = new Map<string, number>(IDS.map((id) => [id, 0]));
  let killed = false;
  let stop = false;
  let wake: () => void = () => undefined;
  const conversation = async (child: number, id: string): Promise<void> => {
    for (let n = 0; !stop; n++) {
      const message = `${id} from ${child} #${n}`;
      let reply;
      try {
        reply = await post(`${(children[child] as { url: string }).url}/agent/${id}/chat`, { message });
      } catch {
        (inFlight.get(id) as string[]).push(message); // its server was killed: this turn's fate is unknown
        return;
      }
      assert.equal(reply.status, 200, JSON.stringify(reply.body));
      assert.equal(reply.body['response'], message);
      (acked.get(id) as string[]).push(message);
      if (killed) afterKill.set(id, (afterKill.get(id) as number) + 1);
      wake();
    }
  };
  const total = (): number => [...acked.values()].reduce((sum, list) => sum + list.length, 0);
  const reached = (done: () => boolean): Promise<void> =>
    new Promise((resolve) => {
      wake = () => done() && resolve();
      wake();
    });
  const conversations = children.flatMap((_, child) => IDS.map((id) => conversation(child, id)));
  // A conversation that fails (an answer other than 200) ends the wait with its failure.
  const failed = Promise.all(conversations).then(() => assert.fail('the conversations ended'));
  const until = (done: () => boolean): Promise<void> => Promise.race([reached(done), failed]);
  await until(() => total() >= 40);
  children[0]?.child.kill('SIGKILL');
  killed = true;
  // Each id served a few times by the survivors since the kill.
  await until(() => [...afterKill.values()].every((count) => count >= 3));
  stop = true;
  await Promise.all(conversations);
  failed.catch(() => undefined);

  for (const id of IDS) {
    const messages = (await storage.load(id))?.messages ?? [];
    const asked: string[] = [];
    for (let i = 0; i < messages.length; i += 2) {
      assert.deepEqual(messages[i + 1], { role: 'assistant', content: messages[i]?.content }, `${id}: reply follows its question`);
      asked.push(messages[i]?.content as string);
    }
    assert.equal(new Set(asked).size, asked.length, `${id}: no turn stored twice`);
    const missing = (acked.get(id) as string[]).filter((message) => !asked.includes(message));
    assert.deepEqual(missing, [], `${id}: every acknowledged turn stored`);
    const unacknowledged = asked.filter((message) => !(acked.get(id) as string[]).includes(message));
    for (const message of unacknowledged) assert.ok((inFlight.get(id) as string[]).includes(message), `${id}: ${message} stored, never sent`);
  }
  for (const child of children.slice(1)) child.child.kill('SIGTERM');
  for (const child of children.slice(1)) assert.equal((await child.exited).code, 0, child.stderr());
}

test('Postgres: one of three servers killed mid-turn, the others serve on; nothing acknowledged lost, nothing twice', async (t) => {
  const schema = `ar_kill_${runTag()}`;
  const pool = new pg.Pool({ ...PG_CONFIG, max: 2 });
  t.after(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });
  const storage = postgresStorage(pool, { schema });
  await storage.head('create-tables-first');
  await killOneOfThree(t, { backend: 'postgres', schema }, storage);
});

test('Redis: one of three servers killed mid-turn, the others serve on once its lease ran out; nothing acknowledged lost, nothing twice', async (t) => {
  const prefix = `ar-kill:${runTag()}:`;
  const client = new Redis(REDIS_URL);
  t.after(async () => {
    const keys = await client.keys(`${prefix}*`);
    if (keys.length > 0) await client.del(...keys);
    await client.quit();
  });
  await killOneOfThree(t, { backend: 'ioredis', prefix, leaseSeconds: 2 }, redisStorage(client, { prefix }));
});

test('FileStorage: one of three servers on one directory killed mid-turn, the others serve on; nothing acknowledged lost, nothing twice', async (t) => {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'agent-router-kill-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await killOneOfThree(t, { backend: 'file', dir }, new FileStorage(dir));
});
