/**
 * postgresStorage under faults a user's Postgres can have while a turn
 * commits, on the real Postgres at 127.0.0.1:5432: another session holding
 * the agent's row (a DBA's open transaction), and the turn's own session
 * ended from outside (pg_terminate_backend). Driven over HTTP.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import type { TestContext } from 'node:test';
import pg from 'pg';
import { postgresStorage } from '../../src/storage/postgres.ts';
import { echoOn, serveAgents } from '../helpers/agents.ts';
import { getJson, postJson } from '../helpers/http.ts';
import { PG_CONFIG, runTag } from '../helpers/storage-backends.ts';
import { tcpProxy } from '../helpers/tcp-proxy.ts';
import { noTurnId } from '../helpers/turns.ts';

const admin = new pg.Pool({ ...PG_CONFIG, max: 3 });
after(() => admin.end());

interface Setup {
  schema: string;
  name: string;
  pool: pg.Pool;
  /** Another session holds every agent row of the schema (`SELECT ... FOR UPDATE` in an open transaction) until the returned release. */
  holdRows(): Promise<() => Promise<void>>;
}

/**
 * A schema of its own and a pool whose sessions carry `name`. Cleaned up in
 * that order: rows released (a commit waiting on them ends), pool ended,
 * schema dropped.
 */
function setUp(t: TestContext): Setup {
  const schema = `ar_test_${runTag()}`;
  const name = `ar_faults_${runTag()}`;
  const pool = new pg.Pool({ ...PG_CONFIG, max: 4, application_name: name });
  pool.on('error', () => undefined);
  const releases: Array<() => Promise<void>> = [];
  t.after(async () => {
    for (const release of releases) await release();
    await pool.end();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  });
  const holdRows = async (): Promise<() => Promise<void>> => {
    const blocker = await admin.connect();
    let held = true;
    const release = async (): Promise<void> => {
      if (!held) return;
      held = false;
      await blocker.query('COMMIT');
      blocker.release();
    };
    releases.push(release);
    await blocker.query('BEGIN');
    await blocker.query(`SELECT 1 FROM "${schema}".agent_router_agents FOR UPDATE`);
    return release;
  };
  return { schema, name, pool, holdRows };
}

/** Fails clearly, instead of hanging the run, when `work` never settles. */
async function withinWatchdog<T>(work: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const watchdog = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`never answered: ${what}`)), 10_000);
  });
  try {
    return await Promise.race([work, watchdog]);
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves with the pid of the session of `name` that waits on a row lock (the commit), once there is one. */
async function commitWaitingOnRow(name: string): Promise<number> {
  for (let i = 0; i < 1000; i++) {
    const { rows } = await admin.query("SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", [name]);
    if (rows[0] !== undefined) return Number(rows[0].pid);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  assert.fail('no commit waited on the row');
}

test('GET state does not wait behind a commit that waits on its row: it answers the committed state at once', async (t) => {
  const { schema, name, pool, holdRows } = setUp(t);
  const url = await serveAgents(t, echoOn(postgresStorage(pool, { schema })));
  assert.equal((await postJson(`${url}/row/chat`, { message: 'first' })).status, 200);
  const releaseRows = await holdRows();

  const chat = postJson(`${url}/row/chat`, { message: 'second' });
  await commitWaitingOnRow(name);
  // The row stays held until the state read is answered: a read that waited for the commit would never be.
  const state = await withinWatchdog(getJson(`${url}/row/state`), 'GET state while the commit waits on its row');
  assert.equal(state.status, 200, JSON.stringify(state.body));
  assert.deepEqual(state.body, { agent_id: 'row', state: {} });
  await releaseRows();
  assert.equal((await chat).status, 200, 'the commit went through once the row was free');
});

test('a turn whose session is ended while its commit runs is answered 409 lock_lost, stores nothing, and the id is served again', async (t) => {
  const { schema, name, pool, holdRows } = setUp(t);
  const storage = postgresStorage(pool, { schema });
  const url = await serveAgents(t, echoOn(storage));
  assert.equal((await postJson(`${url}/ted/chat`, { message: 'first' })).status, 200);
  const releaseRows = await holdRows();

  const chat = postJson(`${url}/ted/chat`, { message: 'ended' });
  const pid = await commitWaitingOnRow(name);
  await admin.query('SELECT pg_terminate_backend($1)', [pid]);
  const reply = await chat;
  await releaseRows();
  assert.equal(reply.status, 409, JSON.stringify(reply.body));
  assert.equal(reply.body.code, 'lock_lost');

  assert.equal((await postJson(`${url}/ted/chat`, { message: 'next' })).status, 200);
  assert.deepEqual((await storage.load('ted'))?.messages.map((message) => message.content), ['first', 'first', 'next', 'next']);
});

test('a turn stored just before Postgres stopped answering is answered 200 within seconds, not when (if ever) the unlock is answered', async (t) => {
  const { schema, pool: direct } = setUp(t);
  // Once armed, the proxy goes silent (nothing carried either way, new connections never answered) right after the commit's answer.
  let armed: 'commit' | 'answer' | undefined;
  let silent = false;
  const port = await tcpProxy(t, PG_CONFIG.port, {
    accept: () => !silent,
    toServer: (bytes) => {
      if (armed === 'commit' && bytes.includes('SET version = version + 1')) armed = 'answer';
      return !silent;
    },
    toClient: () => {
      if (silent) return false;
      if (armed === 'answer') {
        armed = undefined;
        setImmediate(() => (silent = true));
      }
      return true;
    },
  });
  const pool = new pg.Pool({ ...PG_CONFIG, port, max: 4 });
  pool.on('error', () => undefined);
  t.after(() => pool.end());
  const url = await serveAgents(t, echoOn(postgresStorage(pool, { schema })), { turnTimeout: 60 });
  assert.equal((await postJson(`${url}/una/chat`, { message: 'first' })).status, 200);

  armed = 'commit';
  const reply = await withinWatchdog(postJson(`${url}/una/chat`, { message: 'stored' }), 'a chat stored just before Postgres went silent');
  assert.equal(silent, true, 'the proxy went silent after the commit');
  assert.deepEqual(noTurnId(reply.body), { agent_id: 'una', response: 'stored' });
  assert.deepEqual((await postgresStorage(direct, { schema }).load('una'))?.messages.map((message) => message.content), ['first', 'first', 'stored', 'stored']);

  silent = false;
  const next = await withinWatchdog(postJson(`${url}/una/chat`, { message: 'next' }), 'the next chat once Postgres answers');
  assert.equal(next.status, 200, `the lock's session was ended with its connection: ${JSON.stringify(next.body)}`);
});
