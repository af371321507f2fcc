/**
 * examples/postgres.mjs and examples/redis.mjs (shown in docs/guide/storage.md), run as written against the real
 * servers, then the connection under them lost (Postgres ending its
 * sessions, as a restart does; the Redis connection cut): the process must
 * go on serving, not die of an unhandled 'error' event from the driver.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import pg from 'pg';
import { Redis } from 'ioredis';
import { PG_CONFIG, REDIS_URL, runTag } from '../helpers/storage-backends.ts';
import { freePort, runExample } from '../helpers/readme-example.ts';
import { tcpProxy } from '../helpers/tcp-proxy.ts';
import { noTurnId, turnIdOf } from '../helpers/turns.ts';

const root = process.cwd();
/** An example file, as docs/guide/storage.md shows it (docs-examples.test.ts keeps the two equal). */
const example = (name: string): string => readFileSync(path.join(root, 'examples', name), 'utf8');

async function chat(port: number, id: string, message: string): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`http://127.0.0.1:${port}/agent/${id}/chat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ message }) });
  const body = (await res.json()) as Record<string, unknown>;
  // A served turn names itself (checked here); the tests compare the rest of the reply.
  if (res.status === 200) turnIdOf(body, res.headers);
  return { status: res.status, body: noTurnId(body) };
}

test('examples/postgres.mjs survives Postgres ending its idle connections (as a restart does), and serves on', async (t) => {
  const schema = `ar_readme_${runTag()}`;
  const name = `ar_readme_${runTag()}`;
  const admin = new pg.Pool({ ...PG_CONFIG, max: 1 });
  await admin.query(`CREATE SCHEMA "${schema}"`);
  t.after(async () => {
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });
  const port = await freePort();
  const options = encodeURIComponent(`-c search_path=${schema}`);
  const url = `postgres://${PG_CONFIG.user}@${PG_CONFIG.host}:${PG_CONFIG.port}/${PG_CONFIG.database}?application_name=${name}&options=${options}`;
  const server = await runExample(t, example('postgres.mjs').replaceAll('8080', String(port)), port, { drivers: ['pg', 'redis'], env: { DATABASE_URL: url } });
  assert.equal((await chat(port, 'bot-1', 'hello')).status, 200);

  const { rowCount } = await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [name]);
  assert.ok((rowCount ?? 0) > 0, 'the example had a pooled connection to end');
  // Once the sessions are gone, their last word (the FATAL the driver emits as 'error') is on its way to the example.
  for (let i = 0; (await admin.query('SELECT 1 FROM pg_stat_activity WHERE application_name = $1', [name])).rowCount !== 0; i++) {
    assert.ok(i < 500, 'the ended sessions went away');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  const after = await chat(port, 'bot-1', 'still there').catch((error: unknown) => ({ status: 0, body: String(error) }));
  assert.equal(server.exited(), null, `the example died: ${server.stderr()}`);
  assert.deepEqual(after, { status: 200, body: { agent_id: 'bot-1', response: 'still there' } });
});

test('examples/redis.mjs survives its connection being cut, and serves on', async (t) => {
  let cut: Array<() => void> = [];
  let connections = 0;
  const proxyPort = await tcpProxy(t, Number(new URL(REDIS_URL).port), {
    accept: () => {
      connections++;
      return true;
    },
    toServer: (_bytes, link) => {
      cut.push(() => link.cut());
      return true;
    },
  });
  const port = await freePort();
  const id = `readme-${runTag()}`;
  const admin = new Redis(REDIS_URL);
  t.after(async () => {
    const keys = await admin.keys(`myapp:agents:{${id}}*`);
    if (keys.length > 0) await admin.del(...keys);
    await admin.quit();
  });
  const server = await runExample(t, example('redis.mjs').replaceAll('8080', String(port)), port, { drivers: ['pg', 'redis'], env: { REDIS_URL: `redis://127.0.0.1:${proxyPort}` } });
  assert.equal((await chat(port, id, 'hello')).status, 200);

  const before = connections;
  for (const link of cut) link();
  cut = [];
  // A client that heard the close (and lived) connects again.
  for (let i = 0; connections === before && server.exited() === null && i < 500; i++) await new Promise((resolve) => setTimeout(resolve, 10));
  const after = await chat(port, id, 'still there').catch((error: unknown) => ({ status: 0, body: String(error) }));
  assert.equal(server.exited(), null, `the example died: ${server.stderr()}`);
  assert.deepEqual(after, { status: 200, body: { agent_id: id, response: 'still there' } });
});
