/**
 * A storage that cannot be reached or cannot serve, on the real Postgres
 * (127.0.0.1:5432), Redis (127.0.0.1:6379) and file system: what a client
 * sees over HTTP is 503 `storage_unavailable` with Retry-After (JSON chat,
 * invoke and state; `event: error` on a stream that began), the driver's
 * error in the log as its cause; what is not an outage (a lock_timeout the
 * user set) stays 500. A state read whose storage never answers is bounded
 * by turnTimeout as turns are. The services are made unreachable by pointing
 * a client at a closed port or at a TCP proxy the test stops, never by
 * stopping them.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { once } from 'node:events';
import { after, test } from 'node:test';
import type { TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import pg from 'pg';
import { createClient } from 'redis';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { scriptedModel } from '../../src/models/scripted.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { postgresStorage } from '../../src/storage/postgres.ts';
import { redisStorage } from '../../src/storage/redis.ts';
import type { RedisClientLike } from '../../src/storage/redis.ts';
import type { Storage } from '../../src/storage/storage.ts';
import { HTTPTransport } from '../../src/transports/http.ts';
import { counterOn, echoOn } from '../helpers/agents.ts';
import { deferred, getJson, pollUntil, postJson, streamChat } from '../helpers/http.ts';
import type { JsonReply } from '../helpers/http.ts';
import { listen } from '../helpers/listen.ts';
import { collectSSE } from '../helpers/sse.ts';
import { PG_CONFIG, REDIS_URL, runTag } from '../helpers/storage-backends.ts';
import { tcpProxy, type ProxyLink } from '../helpers/tcp-proxy.ts';
import { noTurnId } from '../helpers/turns.ts';

const admin = new pg.Pool({ ...PG_CONFIG, max: 3 });
const redisAdmin = new Redis(REDIS_URL);
const prefix = `ar-test:${runTag()}:outage:`;
after(async () => {
  await admin.end();
  const keys = await redisAdmin.keys(`${prefix}*`);
  if (keys.length > 0) await redisAdmin.del(...keys);
  await redisAdmin.quit();
});

const PUBLIC = { error: 'Storage is unavailable; retry shortly', code: 'storage_unavailable' };

/** Fails clearly, instead of hanging the run, when `work` never settles. */
async function withinWatchdog<T>(work: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const watchdog = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`never answered: ${what}`)), 15_000);
  });
  try {
    return await Promise.race([work, watchdog]);
  } finally {
    clearTimeout(timer);
  }
}

/** A port nothing listens on: connecting is refused. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** `counter-*` counts, every other id echoes; the router's log is kept (message and error) for the test to read. */
async function serveOn(t: TestContext, storage: Storage, turnTimeout = 5, maxStreams?: number): Promise<{ url: string; logged: unknown[] }> {
  const registry = new AgentRegistry();
  registry.register('counter-.*', counterOn(storage));
  registry.register('.*', echoOn(storage));
  const logged: unknown[] = [];
  const router = new AgentRouter(registry, { turnTimeout, maxStreams, logger: { error: (_message: unknown, error: unknown) => logged.push(error) } });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  return { url, logged };
}

/** `upstream`: the origin of the remote agent server the error was relayed from, which the message and Agent-Router-Upstream name. */
function assertUnavailable(reply: JsonReply, what: string, upstream?: string): void {
  assert.equal(reply.status, 503, `${what}: ${JSON.stringify(reply.body)}`);
  assert.deepEqual(reply.body, upstream === undefined ? PUBLIC : fromRemote(upstream), what);
  assert.equal(reply.headers.get('retry-after'), '5', what);
  assert.equal(reply.headers.get('agent-router-upstream'), upstream ?? null, what);
}

const fromRemote = (origin: string) => ({ ...PUBLIC, error: `${PUBLIC.error} (from the remote agent server at ${origin})` });

/** Chat, a stream, invoke and state (of `id`, never served, and of `known`, served before) while the storage is down: each told storage is unavailable. */
async function assertAllUnavailable(url: string, known: string, id: string): Promise<void> {
  for (const each of [known, id]) {
    assertUnavailable(await withinWatchdog(postJson(`${url}/${each}/chat`, { message: 'while down' }), `chat on ${each}`), `chat on ${each}`);
    assertUnavailable(await withinWatchdog(getJson(`${url}/${each}/state`), `state of ${each}`), `state of ${each}`);
  }
  assertUnavailable(await withinWatchdog(postJson(`${url}/counter-${id}/invoke`, { method: 'increment' }), 'invoke'), 'invoke');
  const streamed = await withinWatchdog(streamChat(`${url}/${known}/chat`, 'while down').then(collectSSE), 'stream');
  assert.equal(streamed.events.at(-1)?.event, 'error');
  assert.deepEqual(JSON.parse(streamed.events.at(-1)?.data ?? ''), PUBLIC);
}

/** The router logged the outage, with the driver's error as its cause. */
function assertLogged(logged: unknown[], cause: (error: Error & { code?: unknown }) => boolean): void {
  const outages = logged.filter((error) => (error as { code?: unknown }).code === 'storage_unavailable');
  assert.ok(outages.length > 0, `logged: ${logged.map(String).join('; ')}`);
  for (const outage of outages) {
    const original = (outage as Error).cause as Error & { code?: unknown };
    assert.ok(original instanceof Error && cause(original), `cause: ${String(original)} (${String(original?.code)})`);
  }
}

/** A proxy to a real server that can go down: its connections are cut and new ones refused, until it is up again. */
async function failingProxy(t: TestContext, port: number): Promise<{ port: number; down(): void; up(): void }> {
  let down = false;
  const links = new Set<ProxyLink>();
  const proxyPort = await tcpProxy(t, port, {
    accept: () => (down ? 'cut' : true),
    toServer: (_bytes, link) => {
      links.add(link);
      return true;
    },
  });
  return {
    port: proxyPort,
    down() {
      down = true;
      for (const link of links) link.cut();
      links.clear();
    },
    up() {
      down = false;
    },
  };
}

test('Postgres refusing connections (a closed port): chat, stream, invoke and state answer 503 storage_unavailable with Retry-After, ECONNREFUSED in the log', async (t) => {
  const pool = new pg.Pool({ ...PG_CONFIG, port: await closedPort(), max: 2 });
  pool.on('error', () => undefined);
  t.after(() => pool.end());
  const { url, logged } = await serveOn(t, postgresStorage(pool, { schema: `ar_test_${runTag()}` }));
  await assertAllUnavailable(url, 'pat', 'pia');
  assertLogged(logged, (error) => error.code === 'ECONNREFUSED');
});

test('Postgres going away mid-service (connections cut, new ones refused): 503 storage_unavailable, then served again, nothing lost', async (t) => {
  const schema = `ar_test_${runTag()}_away`;
  const proxy = await failingProxy(t, PG_CONFIG.port);
  const pool = new pg.Pool({ ...PG_CONFIG, port: proxy.port, max: 4 });
  pool.on('error', () => undefined);
  t.after(async () => {
    await pool.end();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  });
  const { url, logged } = await serveOn(t, postgresStorage(pool, { schema }));
  assert.equal((await postJson(`${url}/pam/chat`, { message: 'first' })).status, 200);

  proxy.down();
  await assertAllUnavailable(url, 'pam', 'pen');
  assertLogged(logged, (error) => /^Connection terminated/.test(error.message) || error.code === 'ECONNRESET');

  proxy.up();
  const back = await withinWatchdog(postJson(`${url}/pam/chat`, { message: 'back' }), 'chat once Postgres is back');
  assert.equal(back.status, 200, JSON.stringify(back.body));
  assert.deepEqual((await getJson(`${url}/pam/state`)).status, 200);
  const { rows } = await admin.query(`SELECT count(*)::int AS n FROM "${schema}".agent_router_messages`);
  assert.equal(rows[0].n, 4, 'first and back, each with its reply; nothing of the refused turns');
});

/**
 * Two servers on one schema: the first holds `id`'s lock (its model waits),
 * so the second's turn on it waits on Postgres for the lock. Resolves with
 * the second's url, the pid of its waiting session once it waits, and what
 * lets the first finish.
 */
async function turnWaitingForLock(t: TestContext, schema: string, second: pg.PoolConfig, id: string) {
  const name = `ar_outage_${runTag()}`;
  // First of the cleanups (they run in order): a failed test must not leave the first turn, and its pooled lock, waiting.
  const finish = deferred<string>();
  t.after(() => finish.resolve('done'));
  const first = new pg.Pool({ ...PG_CONFIG, max: 3 });
  const waiting = new pg.Pool({ ...PG_CONFIG, max: 3, application_name: name, ...second });
  for (const pool of [first, waiting]) pool.on('error', () => undefined);
  t.after(async () => {
    await first.end();
    await waiting.end();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  });
  const modelCalled = deferred();
  const firstStorage = postgresStorage(first, { schema });
  class Slow extends Agent {
    constructor(agentId: string) {
      super(agentId, { model: scriptedModel(() => (modelCalled.resolve(), finish.promise)), storage: firstStorage });
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Slow);
  const holder = await listen(new AgentRouter(registry, { logger: { error: () => undefined } }).toRequestListener());
  t.after(holder.close);
  const held = postJson(`${holder.url}/${id}/chat`, { message: 'held' });
  await modelCalled.promise;
  const { url, logged } = await serveOn(t, postgresStorage(waiting, { schema }));
  const reply = postJson(`${url}/${id}/chat`, { message: 'waits' });
  let pid: number | undefined;
  for (let i = 0; i < 1000 && pid === undefined; i++) {
    const { rows } = await admin.query("SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", [name]);
    pid = rows[0]?.pid;
    if (pid === undefined) await new Promise((resolve) => setTimeout(resolve, 10));
  }
  assert.ok(pid !== undefined, 'the second turn waits on the lock in Postgres');
  return { url, logged, pid, reply, release: async () => {
    finish.resolve('done');
    assert.equal((await held).status, 200);
  } };
}

test('Postgres ending the session a turn waits on (pg_terminate_backend: 57P01, as a shutdown does): 503 storage_unavailable; the id is served again', async (t) => {
  const waiting = await turnWaitingForLock(t, `ar_test_${runTag()}_term`, {}, 'tia');
  await admin.query('SELECT pg_terminate_backend($1)', [waiting.pid]);
  assertUnavailable(await withinWatchdog(waiting.reply, 'the turn whose session was ended'), 'the turn whose session was ended');
  assertLogged(waiting.logged, (error) => error.code === '57P01');
  await waiting.release();
  assert.equal((await postJson(`${waiting.url}/tia/chat`, { message: 'again' })).status, 200);
});

test("not an outage: a lock_timeout the user set refuses the statement (55P03), which stays 500 internal_error", async (t) => {
  const waiting = await turnWaitingForLock(t, `ar_test_${runTag()}_lockto`, { options: '-c lock_timeout=300' }, 'lou');
  const reply = await withinWatchdog(waiting.reply, 'the turn refused by lock_timeout');
  assert.equal(reply.status, 500, JSON.stringify(reply.body));
  assert.deepEqual(reply.body, { error: 'Internal error', code: 'internal_error' });
  assert.equal(reply.headers.get('retry-after'), null);
  assert.ok(waiting.logged.some((error) => (error as { code?: unknown }).code === '55P03'), 'logged as it is');
  await waiting.release();
});

/** A Redis client of `flavor` through `port`, closed after the test. */
async function redisOn(t: TestContext, flavor: 'node-redis' | 'ioredis', port: number, ioredisOptions: { maxRetriesPerRequest?: number | null; retryStrategy?: () => number } = {}): Promise<RedisClientLike> {
  if (flavor === 'node-redis') {
    const client = createClient({ url: `redis://127.0.0.1:${port}` });
    client.on('error', () => undefined);
    await client.connect();
    t.after(() => client.destroy());
    return client;
  }
  const client = new Redis(`redis://127.0.0.1:${port}`, ioredisOptions);
  client.on('error', () => undefined);
  t.after(() => client.disconnect());
  return client;
}

for (const flavor of ['node-redis', 'ioredis'] as const) {
  test(`Redis unreachable (${flavor}${flavor === 'ioredis' ? ', maxRetriesPerRequest: 1' : ''}): 503 storage_unavailable with Retry-After, then served again`, async (t) => {
    const proxy = await failingProxy(t, 6379);
    // Reconnecting every 50 ms: ioredis's default backoff grows to 2 s a try, so a turn's two commands (load, lock) could outlast turnTimeout.
    const client = await redisOn(t, flavor, proxy.port, { maxRetriesPerRequest: 1, retryStrategy: () => 50 });
    const { url, logged } = await serveOn(t, redisStorage(client, { prefix: `${prefix}${flavor}:` }));
    assert.equal((await postJson(`${url}/ray/chat`, { message: 'first' })).status, 200);

    proxy.down();
    await assertAllUnavailable(url, 'ray', 'rex');
    assertLogged(logged, (error) =>
      ['SocketClosedUnexpectedlyError', 'MaxRetriesPerRequestError'].includes(error.constructor.name) || error.message === 'Connection is closed.');

    proxy.up();
    let back: JsonReply | undefined;
    // The client reconnects on its own backoff: asked again until it has.
    for (let i = 0; i < 100 && back?.status !== 200; i++) {
      back = await withinWatchdog(postJson(`${url}/ray/chat`, { message: 'back' }), 'chat once Redis is back');
      if (back.status !== 200) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    assert.equal(back?.status, 200, JSON.stringify(back?.body));
    assert.deepEqual((await getJson(`${url}/ray/state`)).status, 200);
  });
}

test('shareTurns on Postgres refusing connections: a rejoin and a cancel that ask the shared storage answer 503 storage_unavailable with Retry-After', async (t) => {
  const pool = new pg.Pool({ ...PG_CONFIG, port: await closedPort(), max: 2 });
  pool.on('error', () => undefined);
  const storage = postgresStorage(pool, { schema: `ar_test_${runTag()}`, shareTurns: true });
  t.after(async () => {
    await storage.close();
    await pool.end();
  });
  const { url, logged } = await serveOn(t, storage);
  assertUnavailable(await withinWatchdog(getJson(`${url}/pat/turns/${randomUUID()}/events`), 'rejoin'), 'rejoin of a turn no process here ran');
  assertUnavailable(await withinWatchdog(postJson(`${url}/pat/cancel`, {}), 'cancel'), 'cancel with no turn held here');
  assertLogged(logged, (error) => error.code === 'ECONNREFUSED');
});

test('shareTurns on a Postgres that accepts connections and never answers: a stream still opens (after 2 s) and ends at the turn timeout, not hanging; one whose client left while it waited frees its stream', async (t) => {
  const silent = await tcpProxy(t, 5432, { accept: () => false });
  const pool = new pg.Pool({ ...PG_CONFIG, port: silent, max: 2 });
  pool.on('error', () => undefined);
  const storage = postgresStorage(pool, { schema: `ar_test_${runTag()}`, shareTurns: true });
  t.after(async () => {
    await storage.close();
    await pool.end();
  });
  const { url } = await serveOn(t, storage, 4, 1);
  // A client that leaves while the head waits: its stream is still counted until its turn ends, then freed.
  const leaving = new AbortController();
  const left = streamChat(`${url}/silent/chat`, 'gone', { signal: leaving.signal }).catch((error: unknown) => error);
  setTimeout(() => leaving.abort(), 300);
  assert.equal(((await left) as Error).name, 'AbortError');
  const opened = async (): Promise<Response> => {
    for (;;) {
      const reply = await streamChat(`${url}/silent/chat`, 'hello');
      if (reply.status !== 503) return reply;
      await reply.body?.cancel();
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  };
  const started = await withinWatchdog(opened(), 'a stream once the first one was freed');
  assert.equal(started.status, 200);
  assert.ok(started.headers.get('turn-id'));
  const { events } = await withinWatchdog(collectSSE(started), 'the stream end');
  assert.equal(events.at(-1)?.event, 'error');
  assert.equal(JSON.parse(events.at(-1)?.data ?? '{}').code, 'turn_timeout');
});

test('shareTurns on Postgres: a turn announced late (after its stream stopped waiting) is not reopened by the announce once its log has ended', async (t) => {
  let held = false;
  // The announce is the first write that notifies; it reaches Postgres 2.5 s late, on its own connection.
  const slow = await tcpProxy(t, 5432, {
    toServer: (bytes, link) => {
      if (held || !bytes.includes('pg_notify') || !bytes.includes('turn_events')) return true;
      held = true;
      setTimeout(() => link.send(bytes), 2500);
      return false;
    },
  });
  const schema = `ar_test_${runTag()}_late`;
  const pool = new pg.Pool({ ...PG_CONFIG, port: slow, max: 4 });
  pool.on('error', () => undefined);
  const storage = postgresStorage(pool, { schema, shareTurns: true });
  t.after(async () => {
    await storage.close();
    await pool.end();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  });
  const { url } = await serveOn(t, storage);
  const started = Date.now();
  const reply = await withinWatchdog(streamChat(`${url}/late/chat`, 'hello'), 'the stream head');
  const turnId = reply.headers.get('turn-id') as string;
  const { events } = await withinWatchdog(collectSSE(reply), 'the stream end');
  assert.equal(events.at(-1)?.event, 'done');
  assert.ok(held, 'the announce was held');
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, started + 4000 - Date.now())));
  const shared = await (storage.turns as NonNullable<Storage['turns']>).read(turnId, 0);
  assert.equal(shared?.ended, true, 'the log still reads as ended');
  assert.deepEqual(shared?.entries.map((entry) => JSON.parse(entry)), ['hello', { finished: { agent_id: 'late', text: 'hello' } }]);
});

test('shareTurns on Postgres whose turn tables are gone: the stream still completes, and each failed copy is logged with its agent_id and turn_id', async (t) => {
  const schema = `ar_test_${runTag()}_notables`;
  const pool = new pg.Pool({ ...PG_CONFIG, max: 4 });
  const storage = postgresStorage(pool, { schema, shareTurns: true });
  t.after(async () => {
    await storage.close();
    await pool.end();
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  });
  const registry = new AgentRegistry();
  registry.register('.*', echoOn(storage));
  const logged: Array<{ message: string; fields: unknown }> = [];
  const router = new AgentRouter(registry, { logger: { error: (message: string, _error?: unknown, fields?: unknown) => void logged.push({ message, fields }) } });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  assert.equal((await postJson(`${url}/first/chat`, { message: 'makes the tables' })).status, 200);
  const tables = await admin.query(`SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_name LIKE '%turn%'`, [schema]);
  assert.ok(tables.rows.length > 0, 'the turn tables exist');
  for (const { table_name: table } of tables.rows) await admin.query(`DROP TABLE "${schema}"."${table}" CASCADE`);

  const reply = await withinWatchdog(streamChat(`${url}/bot/chat`, 'still here'), 'the stream head');
  const turnId = reply.headers.get('turn-id');
  const { events } = await withinWatchdog(collectSSE(reply), 'the stream end');
  assert.equal(events.map((e) => e.data).join(''), 'still here[DONE]');
  await pollUntil(() => logged.length >= 2, 3000);
  const about = logged.filter((entry) => /shared storage failed/.test(entry.message));
  assert.ok(about.some((entry) => entry.message.includes('announcing')), JSON.stringify(logged));
  for (const entry of about) assert.deepEqual(entry.fields, { agentId: 'bot', turnId }, entry.message);
});

for (const flavor of ['node-redis', 'ioredis'] as const) {
  test(`shareTurns on Redis gone unreachable (${flavor}): a rejoin and a cancel that ask the shared storage answer 503 storage_unavailable with Retry-After`, async (t) => {
    const proxy = await failingProxy(t, 6379);
    const client = await redisOn(t, flavor, proxy.port, { maxRetriesPerRequest: 1, retryStrategy: () => 50 });
    const storage = redisStorage(client, { prefix: `${prefix}${flavor}-shared:`, shareTurns: true });
    t.after(() => storage.close());
    const { url, logged } = await serveOn(t, storage);
    assert.equal((await postJson(`${url}/ray/chat`, { message: 'first' })).status, 200);

    proxy.down();
    assertUnavailable(await withinWatchdog(getJson(`${url}/ray/turns/${randomUUID()}/events`), 'rejoin'), 'rejoin of a turn no process here ran');
    assertUnavailable(await withinWatchdog(postJson(`${url}/ray/cancel`, {}), 'cancel'), 'cancel with no turn held here');
    assertLogged(logged, (error) =>
      ['SocketClosedUnexpectedlyError', 'MaxRetriesPerRequestError', 'ClientClosedError'].includes(error.constructor.name) ||
      error.message === 'Connection is closed.' ||
      error.code === 'ECONNRESET');
  });
}

test('a remote router whose storage is unavailable: HTTPTransport relays its 503 storage_unavailable with Retry-After, and its stream error', async (t) => {
  const pool = new pg.Pool({ ...PG_CONFIG, port: await closedPort(), max: 2 });
  pool.on('error', () => undefined);
  t.after(() => pool.end());
  const remote = await serveOn(t, postgresStorage(pool, { schema: `ar_test_${runTag()}` }));
  const registry = new AgentRegistry();
  registry.register('.*', new HTTPTransport(remote.url));
  const front = await listen(new AgentRouter(registry, { logger: { error: () => undefined } }).toRequestListener());
  t.after(front.close);

  const origin = new URL(remote.url).origin;
  assertUnavailable(await postJson(`${front.url}/far/chat`, { message: 'hi' }), 'relayed chat', origin);
  assertUnavailable(await getJson(`${front.url}/far/state`), 'relayed state', origin);
  const streamed = await collectSSE(await streamChat(`${front.url}/far/chat`, 'hi'));
  assert.equal(streamed.events.at(-1)?.event, 'error');
  assert.deepEqual(JSON.parse(streamed.events.at(-1)?.data ?? ''), fromRemote(origin));
});

// Next to the helpers: the .ts source under tsx, the compiled .js under the coverage run.
const fromSource = import.meta.url.endsWith('.ts');
const starvedChild = fileURLToPath(new URL(`../helpers/fd-starved-child.${fromSource ? 'ts' : 'js'}`, import.meta.url));

/** One request on `agent`'s single kept-alive connection: a process out of file descriptors cannot accept another. */
function request(agent: http.Agent, url: string, method: 'GET' | 'POST', body?: unknown): Promise<JsonReply> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { agent, method, headers: { 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: new Headers(res.headers as Record<string, string>), body: JSON.parse(text) }));
    });
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

test('FileStorage in a process out of file descriptors (EMFILE): 503 storage_unavailable, then served again once it has some', async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), 'ar-outage-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const args = fromSource ? ['--import', import.meta.resolve('tsx'), starvedChild, dir] : [starvedChild, dir];
  const env = { ...process.env };
  delete env['NODE_V8_COVERAGE'];
  const child = spawn(process.execPath, args, { env, stdio: ['pipe', 'pipe', 'pipe'] });
  t.after(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (text: string) => (out += text));
  child.stderr.resume();
  const printed = async (pattern: RegExp): Promise<RegExpExecArray> => {
    for (;;) {
      const match = pattern.exec(out);
      if (match !== null) return match;
      await once(child.stdout, 'data');
    }
  };
  const url = (await withinWatchdog(printed(/listening on (http:\/\/\S+)/), 'the child listening'))[1] as string;
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  t.after(() => agent.destroy());
  assert.equal((await request(agent, `${url}/agent/fay/chat`, 'POST', { message: 'first' })).status, 200);

  child.stdin.write('starve\n');
  assert.equal((await withinWatchdog(printed(/starved (\S+)/), 'the child starving'))[1], 'EMFILE');
  assertUnavailable(await withinWatchdog(request(agent, `${url}/agent/fay/chat`, 'POST', { message: 'starved' }), 'chat'), 'chat');
  assertUnavailable(await withinWatchdog(request(agent, `${url}/agent/counter-1/invoke`, 'POST', { method: 'increment' }), 'invoke'), 'invoke');
  assertUnavailable(await withinWatchdog(request(agent, `${url}/agent/gil/state`, 'GET'), 'state'), 'state');

  child.stdin.write('feed\n');
  await withinWatchdog(printed(/fed/), 'the child fed');
  assert.equal((await request(agent, `${url}/agent/fay/chat`, 'POST', { message: 'fed' })).status, 200);
  assert.deepEqual(noTurnId((await request(agent, `${url}/agent/counter-1/invoke`, 'POST', { method: 'increment' })).body), { agent_id: 'counter-1', result: 1 });
});
