// The Postgres TurnChannel over a real Postgres: two storages on two pools stand for two processes.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, test, type TestContext } from 'node:test';
import pg from 'pg';
import { postgresStorage } from '../../src/storage/postgres.ts';
import type { TurnChannel } from '../../src/storage/turn-channel.ts';
import { PG_CONFIG, runTag } from '../helpers/storage-backends.ts';
import { cancelReachesHolder, following, logIsShared, within } from '../helpers/turn-channel-contract.ts';

const admin = new pg.Pool({ ...PG_CONFIG, max: 1 });
const schemas: string[] = [];
after(async () => {
  for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await admin.end();
});

/** Two processes' storages on one schema; each pool names itself, so a test can find its sessions. */
async function twoProcesses(t: TestContext) {
  const schema = `ar_test_${runTag()}_ch${schemas.length}`;
  schemas.push(schema);
  const names = [`ar-a-${randomUUID()}`, `ar-b-${randomUUID()}`];
  const pools = names.map((name) => new pg.Pool({ ...PG_CONFIG, max: 4, application_name: name }));
  for (const pool of pools) pool.on('error', () => undefined);
  const storages = pools.map((pool) => postgresStorage(pool, { schema, shareTurns: true }));
  t.after(async () => {
    await Promise.all(storages.map((storage) => storage.close()));
    await Promise.all(pools.map((pool) => pool.end()));
  });
  const side = (i: number) => {
    const storage = storages[i]!;
    assert.ok(storage.turns, 'shareTurns: true gives the storage a turn channel');
    return { turns: storage.turns as TurnChannel, lock: (id: string) => storage.lock(id), name: names[i]! };
  };
  return { a: side(0), b: side(1) };
}

test('postgres turn channel: a log written by one process is read and followed by another, trimmed and ended', async (t) => {
  const { a, b } = await twoProcesses(t);
  await logIsShared(a, b);
});

test('postgres turn channel: cancel reaches the process holding the turn, and busy follows the agent\'s lock', async (t) => {
  const { a, b } = await twoProcesses(t);
  await cancelReachesHolder(a, b);
});

test('postgres turn channel: a listening session the server ends is replaced; its follower is woken to read again and hears what follows, and cancels reach it again', async (t) => {
  const { a, b } = await twoProcesses(t);
  const turnId = randomUUID();
  await a.turns.append({ agentId: 'bot', turnId, from: 1, entries: ['"one"'], first: 1, ended: false, ttlSeconds: 300 });
  const follower = await following(b.turns, turnId);
  const stopCancels = await b.turns.onCancel((_agentId, request) => ('turnId' in request && request.turnId === 'held' ? ['held'] : []));

  const { rows } = await admin.query<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'", [b.name]);
  assert.equal(rows.length, 1, 'process b listens on one session');
  await admin.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid]);

  // Once listening again, every follower is woken: what was written meanwhile may have gone unheard.
  await within(follower.woken(), 'the follower woken after the session was replaced');
  const again = await admin.query<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'", [b.name]);
  assert.equal(again.rows.length, 1, 'listening again, on a new session');
  assert.notEqual(again.rows[0]!.pid, rows[0]!.pid);

  await a.turns.append({ agentId: 'bot', turnId, from: 2, entries: ['" two"'], first: 1, ended: false, ttlSeconds: 300 });
  await within(follower.woken(), 'the follower woken by an append on the new session');
  assert.deepEqual((await b.turns.read(turnId, 0))?.entries, ['"one"', '" two"']);
  assert.deepEqual(await within(a.turns.cancel('bot', { turnId: 'held' }, 5000), 'cancel after the session was replaced'), ['held']);
  follower.stop();
  stopCancels();
});
