/**
 * postgresStorage details beyond the shared contract, on the real Postgres
 * at 127.0.0.1:5432 (database `test`), each test in a schema of its own that
 * is dropped afterwards.
 */
import assert from 'node:assert/strict';
import { after, mock, test } from 'node:test';
import type { TestContext } from 'node:test';
import pg from 'pg';
import type { ChatMessage } from '../../src/types.ts';
import { postgresStorage, postgresStorageDDL } from '../../src/storage/postgres.ts';
import type { PgPoolLike } from '../../src/storage/postgres.ts';
import { echoOn, serveAgents } from '../helpers/agents.ts';
import { postJson } from '../helpers/http.ts';
import { PG_CONFIG, runTag } from '../helpers/storage-backends.ts';
import { tcpProxy, type ProxyLink } from '../helpers/tcp-proxy.ts';

const admin = new pg.Pool({ ...PG_CONFIG, max: 2 });
after(() => admin.end());

function newSchema(t: TestContext): string {
  const schema = `ar_test_${runTag()}`;
  t.after(() => admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
  return schema;
}

function newPool(t: TestContext, config: pg.PoolConfig = {}): pg.Pool {
  const pool = new pg.Pool({ ...PG_CONFIG, max: 4, ...config });
  pool.on('error', () => undefined);
  t.after(() => pool.end());
  return pool;
}

/** Fails clearly, instead of hanging the run, when `work` never settles. */
async function withinWatchdog<T>(work: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const watchdog = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`never settled: ${what}`)), 15_000);
  });
  try {
    return await Promise.race([work, watchdog]);
  } finally {
    clearTimeout(timer);
  }
}

test('creates the tables postgresStorageDDL documents, and several first uses at once do not trip on each other', async (t) => {
  const schema = newSchema(t);
  const pool = newPool(t);
  const stores = Array.from({ length: 4 }, () => postgresStorage(pool, { schema }));
  await Promise.all(stores.map((store, i) => store.commit(`first-${i}`, { expectedVersion: 0, state: { i }, append: [] })));
  const { rows } = await admin.query(
    'SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = $1 ORDER BY table_name, ordinal_position',
    [schema],
  );
  assert.deepEqual(rows.map((row) => `${row.table_name}.${row.column_name}:${row.data_type}`), [
    'agent_router_agents.key:text', 'agent_router_agents.id:text', 'agent_router_agents.version:bigint',
    'agent_router_agents.state:json', 'agent_router_agents.updated_at:timestamp with time zone',
    'agent_router_messages.key:text', 'agent_router_messages.version:bigint', 'agent_router_messages.idx:integer',
    'agent_router_messages.message:json',
    'agent_router_turn_events.turn_id:text', 'agent_router_turn_events.seq:integer', 'agent_router_turn_events.entry:text',
    'agent_router_turns.turn_id:text', 'agent_router_turns.agent_id:text', 'agent_router_turns.first:integer',
    'agent_router_turns.ended:boolean', 'agent_router_turns.expires_at:timestamp with time zone',
  ]);
  const ddl = postgresStorageDDL({ schema });
  assert.match(ddl, new RegExp(`CREATE TABLE IF NOT EXISTS "${schema}"\\."agent_router_agents"`));
  assert.match(ddl, /PRIMARY KEY \(key, version, idx\)/);
  // The documented way to find an agent by id by hand.
  const found = await admin.query(
    `SELECT id FROM "${schema}".agent_router_agents WHERE key = encode(sha256(convert_to($1, 'UTF8')), 'hex')`, ['first-2']);
  assert.deepEqual(found.rows, [{ id: 'first-2' }]);
});

test('createTables: false leaves the schema to a migration that runs postgresStorageDDL', async (t) => {
  const schema = newSchema(t);
  const pool = newPool(t);
  const store = postgresStorage(pool, { schema, createTables: false, tablePrefix: 'mig_' });
  await assert.rejects(store.head('x'), /does not exist/);
  await admin.query(postgresStorageDDL({ schema, tablePrefix: 'mig_' }));
  const version = await store.commit('x', { expectedVersion: 0, state: {}, append: [] });
  assert.equal(await store.head('x'), version);
});

test('two table prefixes in one schema are separate stores, and their locks do not collide', async (t) => {
  const schema = newSchema(t);
  const pool = newPool(t);
  const a = postgresStorage(pool, { schema, tablePrefix: 'a_' });
  const b = postgresStorage(pool, { schema, tablePrefix: 'b_' });
  await a.commit('same', { expectedVersion: 0, state: { from: 'a' }, append: [] });
  assert.equal(await b.load('same'), undefined);
  const unlockA = await a.lock('same');
  const unlockB = await withinWatchdog(b.lock('same'), 'b.lock while a holds the same id under another prefix');
  await unlockA();
  await unlockB();
});

test('a locked turn runs on the lock\'s own connection: a pool of one does not deadlock', async (t) => {
  const schema = newSchema(t);
  const pool = newPool(t, { max: 1 });
  const store = postgresStorage(pool, { schema });
  await store.head('warm-up'); // creates the tables before the only client is taken
  const unlock = await store.lock('solo');
  const version = await withinWatchdog((async () => {
    assert.equal(await store.head('solo'), 0);
    assert.equal(await store.load('solo'), undefined);
    return store.commit('solo', { expectedVersion: 0, state: { ok: true }, append: [{ role: 'user', content: 'hi' }] });
  })(), 'head/load/commit while the only pool client holds the lock');
  await unlock();
  assert.equal(await store.head('solo'), version);
});

test('unlock gives the connection back as it was: the pool\'s own idle_session_timeout restored', async (t) => {
  const schema = newSchema(t);
  const pool = newPool(t, { max: 1, options: '-c idle_session_timeout=10min' });
  const store = postgresStorage(pool, { schema, leaseSeconds: 5 });
  const unlock = await store.lock('restore');
  await unlock();
  // The pool has one client, so these run on the connection that held the lock.
  const { rows } = await pool.query('SHOW idle_session_timeout');
  assert.equal(rows[0].idle_session_timeout, '10min');
  const pid = (await pool.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
  const locks = await admin.query("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = $1", [pid]);
  assert.equal(locks.rows[0].n, 0, 'no advisory lock left behind');
});

test('a held lock\'s session is pinged every third of the lease, so the server keeps it', async (t) => {
  mock.timers.enable({ apis: ['setInterval'] });
  t.after(() => mock.timers.reset());
  const schema = newSchema(t);
  const name = `ar_ping_${runTag()}`;
  const pool = newPool(t, { application_name: name });
  const store = postgresStorage(pool, { schema, leaseSeconds: 30 });
  await store.head('warm-up');
  const unlock = await store.lock('pinged');
  const lastQuery = async (): Promise<string[]> =>
    (await admin.query('SELECT query FROM pg_stat_activity WHERE application_name = $1', [name])).rows.map((row) => String(row.query));
  assert.ok((await lastQuery()).some((query) => query.includes('pg_try_advisory_lock')));
  mock.timers.tick(10_000);
  for (let i = 0; i < 500 && !(await lastQuery()).includes('SELECT 1'); i++) await new Promise((resolve) => setImmediate(resolve));
  assert.ok((await lastQuery()).includes('SELECT 1'), 'the held session ran the ping');
  await unlock();
});

test('a turn whose lock session ended mid-turn is refused at commit (lock_lost), not written through the pool beside the next holder', async (t) => {
  const schema = newSchema(t);
  const name = `ar_lost_${runTag()}`;
  const store = postgresStorage(newPool(t, { application_name: name }), { schema });
  const unlock = await store.lock('lost');
  const first = await store.commit('lost', { expectedVersion: 0, state: { n: 1 }, append: [] });
  // What a lease expiry or a dropped connection does: the server ends the lock's session.
  await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [name]);
  let refused: unknown;
  for (let i = 0; i < 200 && refused === undefined; i++) {
    await new Promise((resolve) => setTimeout(resolve, 10));
    await store.commit('lost', { expectedVersion: first, state: { n: 2 }, append: [] }).then(
      () => assert.fail('committed without its lock'),
      (error: { code?: string }) => {
        // Until the client hears its session is gone, the commit fails on the dead connection itself.
        if (error.code === 'lock_lost') refused = error;
      },
    );
  }
  assert.equal((refused as { status?: number } | undefined)?.status, 409, 'refused as lock_lost');
  await unlock();
  const other = postgresStorage(newPool(t), { schema });
  assert.equal(await other.head('lost'), first, 'nothing was written');
});

test('delete racing a commit leaves no message behind: the id starts clean and takes commits again', async (t) => {
  const schema = newSchema(t);
  const store = postgresStorage(newPool(t), { schema });
  const say = (content: string) => [{ role: 'user' as const, content }];
  for (let round = 0; round < 60; round++) {
    const id = `racing-${round}`;
    const old = await store.commit(id, { expectedVersion: 0, state: {}, append: say('old conversation') });
    await Promise.allSettled([store.commit(id, { expectedVersion: old, state: {}, append: say('in flight') }), store.delete(id)]);
    // Whatever won, the id is either deleted or holds both turns; a fresh start after a delete must work.
    const head = await store.head(id);
    if (head !== 0) await store.delete(id);
    const first = await store.commit(id, { expectedVersion: 0, state: {}, append: say('new conversation') });
    assert.equal(await store.commit(id, { expectedVersion: first, state: {}, append: say('second turn') }), first + 1, `round ${round}`);
    assert.deepEqual((await store.load(id))?.messages.map((m) => m.content), ['new conversation', 'second turn'], `round ${round}`);
  }
});

test('state and messages come back byte for byte: key order, duplicate-free text, \\u0000 inside strings', async (t) => {
  const schema = newSchema(t);
  const store = postgresStorage(newPool(t), { schema });
  const state = { zeta: 1, alpha: 'nul \u0000 inside', 'é': [1, 2] };
  await store.commit('exact', { expectedVersion: 0, state, append: [{ role: 'assistant', content: '\u0000' }] });
  const record = await store.load('exact');
  assert.equal(JSON.stringify(record?.state), JSON.stringify(state));
  assert.deepEqual(record?.messages, [{ role: 'assistant', content: '\u0000' }]);
  await assert.rejects(store.commit('nul\u0000id', { expectedVersion: 0, state: {}, append: [] }), { code: 'invalid_agent_id' });
});

test('close() releases held locks (their connections close) and leaves the pool open', async (t) => {
  const schema = newSchema(t);
  const pool = newPool(t);
  const first = postgresStorage(pool, { schema });
  await first.lock('closing');
  await first.close();
  const unlock = await withinWatchdog(postgresStorage(pool, { schema }).lock('closing'), 'lock after close');
  await unlock();
  assert.deepEqual((await pool.query('SELECT 1 AS one')).rows, [{ one: 1 }]);
});

/**
 * A TCP proxy to the real Postgres that can go silent: its connections stop
 * carrying bytes both ways and new ones are accepted and never answered, as
 * when a server hangs or a network drops packets without a reset.
 */
async function silenceableProxy(t: TestContext): Promise<{ port: number; silence(): void }> {
  let silent = false;
  const carry = (): boolean => !silent;
  const port = await tcpProxy(t, PG_CONFIG.port, { accept: carry, toServer: carry, toClient: carry });
  return { port, silence: () => (silent = true) };
}

test('a server that stops answering: a lock waiting on it gives up when the turn is aborted, so a turn times out as JSON instead of hanging', async (t) => {
  const proxy = await silenceableProxy(t);
  const schema = newSchema(t);
  // idleTimeoutMillis: the idle connection is gone by the second case, so the pool has to connect anew.
  const pool = newPool(t, { port: proxy.port, max: 2, idleTimeoutMillis: 100 });
  const storage = postgresStorage(pool, { schema });
  const url = await serveAgents(t, echoOn(storage), { turnTimeout: 0.5 });
  assert.equal((await postJson(`${url}/pam/chat`, { message: 'hello' })).status, 200, 'served while the server answers');

  proxy.silence();
  // A pooled connection that went silent: the lock query hangs.
  const held = await pool.connect();
  held.release();
  await withinWatchdog(assert.rejects(storage.lock('pam', AbortSignal.timeout(200)), { name: 'TimeoutError' }), 'lock on a silent connection');
  // No connection left: the pool connects anew, and the connect hangs.
  await new Promise((resolve) => setTimeout(resolve, 300));
  await withinWatchdog(assert.rejects(storage.lock('pam', AbortSignal.timeout(200)), { name: 'TimeoutError' }), 'lock on a silent connect');

  const reply = await withinWatchdog(postJson(`${url}/pam/chat`, { message: 'again' }), 'chat on a silent server');
  assert.equal(reply.status, 504);
  assert.equal((reply.body as { code: string }).code, 'turn_timeout');
});

type CommitCut = 'before' | 'on-answer' | 'after-300ms';

/**
 * A proxy to the real Postgres that, once armed, cuts the connection carrying
 * the next commit statement: before passing it on (the server never sees
 * it), when its answer comes back (the answer is lost), or a while after
 * passing it on (the statement may still be running on the server). After a
 * lost answer it refuses (closes at once) the connections that follow for
 * `refuseAfterLostAnswer` ms (Infinity: for good), as a server restarting
 * would. `connects` counts the connections asked of it, refused ones too.
 */
async function commitCuttingProxy(t: TestContext, refuseAfterLostAnswer = 0): Promise<{ port: number; arm(when: CommitCut): void; armed(): boolean; connects(): number }> {
  let armed: CommitCut | undefined;
  let refuseUntil = 0;
  let connects = 0;
  const cutOnAnswer = new WeakSet<ProxyLink>();
  const port = await tcpProxy(t, PG_CONFIG.port, {
    accept: () => {
      connects++;
      return Date.now() < refuseUntil ? 'cut' : true;
    },
    toServer(bytes, link) {
      if (armed === undefined || !bytes.includes('SET version = version + 1')) return true;
      const when = armed;
      armed = undefined;
      if (when === 'before') {
        link.cut();
        return false;
      }
      if (when === 'on-answer') cutOnAnswer.add(link);
      else setTimeout(() => link.cut(), 300);
      return true;
    },
    toClient(_bytes, link) {
      if (!cutOnAnswer.has(link)) return true;
      refuseUntil = Date.now() + refuseAfterLostAnswer;
      link.cut();
      return false;
    },
  });
  return { port, arm: (when) => (armed = when), armed: () => armed !== undefined, connects: () => connects };
}

test('a commit whose answer is lost is reported as it happened: stored when the server applied it, failed when it never arrived', async (t) => {
  const proxy = await commitCuttingProxy(t);
  const schema = newSchema(t);
  const storage = postgresStorage(newPool(t, { port: proxy.port }), { schema });
  const first = await storage.commit('lou', { expectedVersion: 0, state: { n: 0 }, append: [] });

  let unlock = await storage.lock('lou');
  proxy.arm('on-answer');
  const turn = { expectedVersion: first, state: { n: 1 }, append: [{ role: 'user', content: 'once' }] as ChatMessage[] };
  assert.equal(await storage.commit('lou', turn), first + 1, 'applied, its answer lost: reported stored');
  assert.equal(proxy.armed(), false, 'the commit went through the armed proxy');
  await unlock();
  assert.deepEqual(await storage.load('lou'), { version: first + 1, state: { n: 1 }, messages: [{ role: 'user', content: 'once' }] });

  unlock = await storage.lock('lou');
  proxy.arm('before');
  await assert.rejects(storage.commit('lou', { expectedVersion: first + 1, state: { n: 2 }, append: [{ role: 'user', content: 'never' }] }));
  assert.equal(proxy.armed(), false);
  await unlock();
  assert.deepEqual(await storage.load('lou'), { version: first + 1, state: { n: 1 }, messages: [{ role: 'user', content: 'once' }] }, 'never arrived: reported failed, nothing stored');
});

test('a commit whose answer is lost while the server also refuses new connections for a moment is answered 200 once it can tell: it was stored', async (t) => {
  // The answer is lost, and the next connections are refused for a while (a server restarting, a network blip).
  const proxy = await commitCuttingProxy(t, 300);
  const schema = newSchema(t);
  const url = await serveAgents(t, echoOn(postgresStorage(newPool(t, { port: proxy.port }), { schema })));
  assert.equal((await postJson(`${url}/kit/chat`, { message: 'first' })).status, 200);

  proxy.arm('on-answer');
  const reply = await withinWatchdog(postJson(`${url}/kit/chat`, { message: 'once' }), 'chat whose answer was lost');
  assert.equal(proxy.armed(), false, 'the commit went through the armed proxy');
  assert.equal(reply.status, 200, JSON.stringify(reply.body));
  const stored = await postgresStorage(admin, { schema }).load('kit');
  assert.deepEqual(stored?.messages.map((message) => message.content), ['first', 'first', 'once', 'once']);
});

test('a lost commit that cannot be checked within 5 s is answered 503 storage_unavailable, and its check stops there: no connection or query after the answer', async (t) => {
  // The answer is lost and the server stays out of reach: every try of the check fails at once.
  const proxy = await commitCuttingProxy(t, Infinity);
  const schema = newSchema(t);
  // One connection, the lock's: each try of the check has to connect anew, through the proxy.
  const url = await serveAgents(t, echoOn(postgresStorage(newPool(t, { port: proxy.port, max: 1 }), { schema })));
  assert.equal((await postJson(`${url}/gus/chat`, { message: 'first' })).status, 200);

  proxy.arm('on-answer');
  const reply = await withinWatchdog(postJson(`${url}/gus/chat`, { message: 'lost' }), 'chat whose answer was lost');
  assert.equal(proxy.armed(), false, 'the commit went through the armed proxy');
  // The server stayed out of reach: the connection's loss is what the turn reports.
  assert.equal(reply.status, 503, JSON.stringify(reply.body));
  assert.equal(reply.body.code, 'storage_unavailable');
  const answeredAt = proxy.connects();
  assert.ok(answeredAt > 2, 'the check tried again while it could');
  // Longer than the check's longest pause between tries (200 ms): a check still running would try again.
  await new Promise((resolve) => setTimeout(resolve, 600));
  assert.equal(proxy.connects(), answeredAt, 'no try of the check after the turn was answered');
});

test('a lost commit still running on the server (waiting on its row) is ended before it is checked, so "failed" stays true, even from a full pool', async (t) => {
  const proxy = await commitCuttingProxy(t);
  const schema = newSchema(t);
  // One connection, which the lock holds: the check needs the lost one's slot back.
  const storage = postgresStorage(newPool(t, { port: proxy.port, max: 1 }), { schema });
  const first = await storage.commit('max', { expectedVersion: 0, state: { n: 0 }, append: [] });
  // Another session holds the agent's row: the commit's UPDATE waits behind it.
  const blocker = await admin.connect();
  t.after(() => blocker.release());
  await blocker.query('BEGIN');
  await blocker.query(`SELECT 1 FROM "${schema}".agent_router_agents FOR UPDATE`);

  const unlock = await storage.lock('max');
  proxy.arm('after-300ms');
  await assert.rejects(storage.commit('max', { expectedVersion: first, state: { n: 1 }, append: [{ role: 'user', content: 'lost' }] }));
  await blocker.query('COMMIT'); // the row is free: an UPDATE still waiting would now go through
  await unlock().catch(() => undefined);
  await new Promise((resolve) => setTimeout(resolve, 200));
  assert.deepEqual(await storage.load('max'), { version: first, state: { n: 0 }, messages: [] }, 'reported failed, and nothing was stored after all');
});

test('a row damaged by hand is refused on every read as storage_corrupt, naming the agent and what is wrong', async (t) => {
  const schema = newSchema(t);
  const storage = postgresStorage(newPool(t), { schema });
  const version = await storage.commit('dot', { expectedVersion: 0, state: { n: 1 }, append: [{ role: 'user', content: 'hi' }] });
  const damages: Array<[string, string, RegExp]> = [
    [`UPDATE "${schema}".agent_router_agents SET state = '[1,2]'`, `UPDATE "${schema}".agent_router_agents SET state = '{}'`, /its state is not a JSON object/],
    [`UPDATE "${schema}".agent_router_messages SET message = '42'`, `UPDATE "${schema}".agent_router_messages SET message = '{"role":"user","content":"hi"}'`, /history entry 0 is not a \{role, content\} message/],
  ];
  for (const [damage, repair, what] of damages) {
    await admin.query(damage);
    for (const read of [() => storage.load('dot'), () => storage.loadSince('dot', { version: version - 1, messages: 0 })]) {
      await assert.rejects(read(), (error: Error & { code?: string; status?: number }) => {
        assert.equal(error.code, 'storage_corrupt');
        assert.equal(error.status, 500);
        assert.match(error.message, /agent "dot"/);
        assert.match(error.message, what);
        return true;
      });
    }
    await admin.query(repair);
  }
  assert.deepEqual(await storage.load('dot'), { version, state: {}, messages: [{ role: 'user', content: 'hi' }] });
});

test('a pg.Client, or a client checked out of a pool, is refused at construction with the fix (a pg.Pool), instead of failing the first turn', async (t) => {
  const client = new pg.Client(PG_CONFIG);
  await client.connect();
  t.after(() => client.end());
  const pooled = await admin.connect();
  t.after(() => pooled.release());
  // TypeScript refuses a Client's type already; from JavaScript (or through a cast) it gets here.
  for (const one of [client, pooled, new pg.Client(PG_CONFIG)] as unknown as PgPoolLike[]) {
    assert.throws(() => postgresStorage(one, { schema: 'unused' }), (error: Error) => {
      assert.ok(error instanceof TypeError);
      assert.match(error.message, /pass a pg\.Pool, not a pg\.Client/);
      assert.match(error.message, /new pg\.Pool\(\{ connectionString/);
      return true;
    });
  }
});

test('bad pools and bad names are refused with the fix in the message', () => {
  assert.throws(() => postgresStorage({} as PgPoolLike), /pass a pg\.Pool/);
  const pool = { query: async () => ({ rows: [] }), connect: async () => ({ query: async () => ({ rows: [] }), release: () => undefined }) };
  assert.throws(() => postgresStorage(pool, { tablePrefix: 'x"; DROP TABLE y; --' }), /tablePrefix must be letters/);
  assert.throws(() => postgresStorage(pool, { tablePrefix: 'p'.repeat(53) }), /at most 52/);
  assert.throws(() => postgresStorage(pool, { schema: 'has space' }), /schema must be a plain identifier/);
  assert.throws(() => postgresStorage(pool, { leaseSeconds: Number.NaN }), /leaseSeconds/);
  assert.match(postgresStorageDDL(), /^CREATE TABLE IF NOT EXISTS "agent_router_agents"/);
});
