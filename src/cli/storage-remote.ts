/**
 * The demo on Postgres or Redis, through the user's own driver. The CLI
 * creates the pool or client, so it also ends it (after the storage closes).
 */
import { StorageUnavailableError } from '../errors.ts';
import { postgresStorage, type PgPoolLike } from '../storage/postgres.ts';
import { redisStorage, type RedisClientLike } from '../storage/redis.ts';
import type { Storage } from '../storage/storage.ts';
import { exportOf, importDriver } from './driver.ts';
import { LoadError } from './load.ts';
import type { StorageSpec } from './storage-spec.ts';

/** A storage the CLI opened for the demo, with what it opened alongside. */
export interface OpenedStorage {
  storage: Storage;
  /** How the banner describes it. */
  label: string;
  /** Closes the storage, then the pool or client the CLI created for it (the CLI owns those). */
  close(): Promise<void>;
}

/** Where the CLI writes a line about a backend going away while serving. */
export type Log = (line: string) => void;

type PostgresSpec = Extract<StorageSpec, { kind: 'postgres' }>;
type RedisSpec = Extract<StorageSpec, { kind: 'redis' }>;

/** How long the check at start waits for a server that does not answer (a firewall dropping packets). */
const CONNECT_TIMEOUT_MS = 10_000;

interface PgPool extends PgPoolLike {
  end(): Promise<void>;
  on(event: 'error', listener: (error: Error) => void): unknown;
}
type PgPoolClass = new (config: { connectionString: string; keepAlive: boolean; keepAliveInitialDelayMillis: number }) => PgPool;
type PgClientClass = new (config: { connectionString: string; connectionTimeoutMillis: number }) => { connect(): Promise<unknown>; end(): Promise<void> };

/** What the CLI calls on either Redis client, besides the commands redisStorage sends. */
interface RedisClient {
  connect(): Promise<unknown>;
  on(event: string, listener: (error: Error) => void): unknown;
  /** node-redis v5+; v4 and ioredis have `quit`. */
  close?(): Promise<unknown>;
  quit?(): Promise<unknown>;
  /** Drops the connection at once: node-redis v5+ `destroy`, v4 and ioredis `disconnect`. */
  destroy?(): unknown;
  disconnect?(): unknown;
}

export async function openPostgres(spec: PostgresSpec, cwd: string, log: Log): Promise<OpenedStorage> {
  const driver = await importDriver('pg', cwd);
  const Pool = driver === undefined ? undefined : (exportOf(driver, 'Pool') as PgPoolClass | undefined);
  const Client = driver === undefined ? undefined : (exportOf(driver, 'Client') as PgClientClass | undefined);
  if (typeof Pool !== 'function' || typeof Client !== 'function') throw missing(spec, 'the pg driver; install it in your project: npm install pg');

  // The pool waits for a connection without limit (a limit there would also fail turns queued behind busy
  // connections), so a one-off client with a timeout checks the server first.
  const probe = new Client({ connectionString: spec.url, connectionTimeoutMillis: CONNECT_TIMEOUT_MS });
  try {
    await probe.connect();
  } catch (error) {
    throw unreachable('Postgres', spec, error);
  }
  await probe.end().catch(() => undefined);

  // TCP keep-alive: a connection to a server that vanished (a host gone, a network dropping packets) errors
  // within about a minute instead of the kernel's hours. A turn waiting on it gives up at its turnTimeout.
  const pool = new Pool({ connectionString: spec.url, keepAlive: true, keepAliveInitialDelayMillis: 10_000 });
  // pg emits errors of idle connections (a server restart) on the pool; unheard, they would end the process.
  pool.on('error', (error) => log(`Postgres at ${spec.address}: ${describe(error, spec.url)}`));
  // The CLI owns the pool and closes the storage first, so turn control may hold its connection: every
  // process serving this storage rejoins and cancels the others' turns.
  const storage = postgresStorage(pool, { schema: spec.schema, tablePrefix: spec.tablePrefix, shareTurns: true });
  const close = async (): Promise<void> => {
    await storage.close();
    await pool.end();
  };
  await check(storage, close, `cannot create postgresStorage's tables in Postgres at ${spec.address}`, spec);
  const schema = spec.schema === undefined ? '' : `, schema ${spec.schema}`;
  return { storage, label: `Postgres at ${spec.shown}${schema} (postgresStorage; kept across restarts)`, close };
}

export async function openRedis(spec: RedisSpec, cwd: string, log: Log): Promise<OpenedStorage> {
  let ready = false; // before: fail at once; after: reconnect, as a server does when Redis restarts
  let reported = false;
  let lastError: unknown;
  const backoff = (retries: number): number => Math.min(50 * 2 ** retries, 2_000);
  let client: RedisClient;
  let driverName: string;

  const nodeRedis = await importDriver('redis', cwd);
  const createClient = nodeRedis === undefined ? undefined : (exportOf(nodeRedis, 'createClient') as ((options: object) => RedisClient) | undefined);
  if (typeof createClient === 'function') {
    driverName = 'node-redis';
    client = createClient({
      url: spec.url,
      socket: { connectTimeout: CONNECT_TIMEOUT_MS, reconnectStrategy: (retries: number, cause: Error) => (ready ? backoff(retries) : cause) },
    });
  } else {
    const ioredis = await importDriver('ioredis', cwd);
    const Redis = ioredis === undefined ? undefined : ((exportOf(ioredis, 'Redis') ?? ioredis['default']) as (new (url: string, options: object) => RedisClient) | undefined);
    if (typeof Redis !== 'function') throw missing(spec, 'a Redis driver; install one in your project: npm install redis (or: npm install ioredis)');
    driverName = 'ioredis';
    client = new Redis(spec.url, { lazyConnect: true, connectTimeout: CONNECT_TIMEOUT_MS, retryStrategy: (times: number) => (ready ? backoff(times) : null) });
  }
  // Both clients emit 'error' for every failed attempt; unheard, node-redis's would end the process.
  client.on('error', (error) => {
    lastError = error;
    if (!ready || reported) return;
    reported = true;
    log(`Redis at ${spec.address}: ${describe(error, spec.url)}; reconnecting`);
  });
  client.on('ready', () => {
    reported = false;
  });
  // The drivers' connectTimeout covers the TCP connect only: a server that accepts and never answers
  // (a stopped Redis, another service's port, TLS spoken to with redis://) would hold the start for ever.
  const drop = (): void => {
    try {
      if (typeof client.destroy === 'function') client.destroy();
      else client.disconnect?.();
    } catch {
      // already closed
    }
  };
  try {
    await withinConnectTimeout(client.connect());
  } catch (error) {
    drop();
    // ioredis rejects with "Connection is closed."; the cause was its last 'error' event.
    throw unreachable('Redis', spec, error instanceof SilentServer ? error : (lastError ?? error));
  }
  ready = true;

  // As for Postgres: the CLI closes the storage before its client, so turn control is shared.
  const storage = redisStorage(client as unknown as RedisClientLike, { prefix: spec.prefix, shareTurns: true });
  const close = async (): Promise<void> => {
    await storage.close();
    await (typeof client.close === 'function' ? client.close() : client.quit?.());
  };
  try {
    await withinConnectTimeout(check(storage, close, `cannot use Redis at ${spec.address}`, spec));
  } catch (error) {
    if (!(error instanceof SilentServer)) throw error;
    drop();
    throw unreachable('Redis', spec, error);
  }
  const prefix = spec.prefix === undefined ? '' : `, key prefix ${JSON.stringify(spec.prefix)}`;
  return { storage, label: `Redis at ${spec.shown}${prefix} (redisStorage on ${driverName}; kept across restarts)`, close };
}

/** One read through the storage: creates Postgres tables, and proves the credentials and rights. */
async function check(storage: Storage, close: () => Promise<void>, failure: string, spec: PostgresSpec | RedisSpec): Promise<void> {
  try {
    await storage.head?.('agent-router-cli-check');
  } catch (error) {
    await close().catch(() => undefined);
    throw new LoadError(`${failure}: ${describe(error, spec.url)}`, { cause: error });
  }
}

/** A server that took the connection and then said nothing for CONNECT_TIMEOUT_MS. */
class SilentServer extends Error {}

function withinConnectTimeout<T>(work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const silent = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new SilentServer(`no answer within ${CONNECT_TIMEOUT_MS / 1000} s`)), CONNECT_TIMEOUT_MS);
  });
  return Promise.race([work, silent]).finally(() => clearTimeout(timer));
}

function missing(spec: PostgresSpec | RedisSpec, what: string): LoadError {
  return new LoadError(`${spec.source} ${spec.scheme}://… needs ${what}`);
}

function unreachable(server: string, spec: PostgresSpec | RedisSpec, error: unknown): LoadError {
  return new LoadError(`cannot connect to ${server} at ${spec.address}: ${describe(error, spec.url)}; check that it runs and the ${spec.source} URL`, { cause: error });
}

const SYSTEM_ERRORS: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ENOTFOUND: 'host not found',
  EAI_AGAIN: 'host not found',
  ETIMEDOUT: 'no answer',
  EHOSTUNREACH: 'host unreachable',
};

/** One line about a driver's error, with the URL's password (if the driver echoed it) masked. */
export function describe(error: unknown, url: string): string {
  // The driver's own error, which names what failed (refused, reset, timed out), as it did before storages wrapped it.
  if (error instanceof StorageUnavailableError) error = error.cause;
  const found = error as { code?: unknown; message?: unknown; cause?: { code?: unknown } } | undefined;
  const code = typeof found?.code === 'string' ? found.code : typeof found?.cause?.code === 'string' ? found.cause.code : undefined;
  const message = String(found?.message ?? error).split('\n', 1)[0] as string;
  let text = code !== undefined && SYSTEM_ERRORS[code] !== undefined ? `${SYSTEM_ERRORS[code]} (${code})` : message || code || 'unknown error';
  for (const secret of secretsOf(url)) text = text.replaceAll(secret, '***');
  return text;
}

function secretsOf(text: string): string[] {
  try {
    const url = new URL(text);
    let decoded = url.password;
    try {
      decoded = decodeURIComponent(url.password);
    } catch {
      // a stray % in the password: mask it as written
    }
    return [url.password, decoded, url.searchParams.get('password') ?? ''].filter((secret) => secret.length > 0);
  } catch {
    return [];
  }
}
