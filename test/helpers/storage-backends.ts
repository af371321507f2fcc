/**
 * The storage backends the contract suite runs against, each on its own
 * throw-away space: a temp directory, a Postgres schema, a Redis key prefix,
 * all unique per run and removed by `cleanup`. Postgres and Redis are the
 * real servers on 127.0.0.1 (see .ci/run).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { createClient } from 'redis';
import { Redis } from 'ioredis';
import { FileStorage } from '../../src/storage/file.ts';
import type { FileStorageOptions } from '../../src/storage/file.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { postgresStorage } from '../../src/storage/postgres.ts';
import type { PostgresStorageOptions } from '../../src/storage/postgres.ts';
import { sameRecord } from '../../src/storage/record-version.ts';
import { redisStorage } from '../../src/storage/redis.ts';
import type { RedisClientLike, RedisStorageOptions } from '../../src/storage/redis.ts';
import type { Storage } from '../../src/storage/storage.ts';

export interface DyingStorage {
  /** Takes locks and never renews them, like a process that died holding them. */
  storage: Storage;
  /** Makes its held leases lapse: moves a shared clock, or nothing when the server's own clock will. */
  expire(): void;
}

export interface StorageBackend {
  name: string;
  /** A storage on the shared backend, as another process would open it. */
  open(): Promise<Storage>;
  /** Present for backends with leases (every lock()ing backend but memory, whose locks die with the process). */
  openDying?(): Promise<DyingStorage>;
  /** Whether every JS string is a storable id (otherwise lone surrogates are refused). */
  acceptsAnyString: boolean;
  /** Whether it has lock() (and leases). */
  locks: boolean;
  /** Whether it has loadSince() (reads only the history a caller lacks). */
  loadsSince: boolean;
  cleanup(): Promise<void>;
}

export const PG_CONFIG = { host: '127.0.0.1', port: 5432, database: 'test', user: 'postgres' } as const;
export const REDIS_URL = 'redis://127.0.0.1:6379';

/**
 * Asserts that a record stored at `version` took exactly `commits` commits,
 * for a test that never saw its first one (another process made it): a
 * record's first version is random (record-version.ts) but starts a range of
 * its own, so `version - commits + 1` must be such a start, and `version` in
 * its range. One commit more or fewer moves that start off the range's first.
 */
export function assertCommits(version: number | undefined, commits: number, message?: string): void {
  if (commits === 0) return assert.equal(version ?? 0, 0, message);
  const first = (version ?? 0) - commits + 1;
  const starts = first === 1 || (first > 1 && !sameRecord(first - 1, first));
  assert.ok(starts && sameRecord(first, version as number), `${message ?? 'commits'}: version ${version} is not ${commits} commits on from a record's first version`);
}

/** A tag unique to this run, safe in identifiers and key prefixes. */
export function runTag(): string {
  return `${process.pid}_${randomBytes(4).toString('hex')}`;
}

export function memoryBackend(): StorageBackend {
  const storage = new MemoryStorage();
  return { name: 'memory', open: async () => storage, acceptsAnyString: true, locks: true, loadsSince: true, cleanup: async () => undefined };
}

export function fileBackend(options: FileStorageOptions = {}): StorageBackend {
  let dir: string | undefined;
  let offset = 0; // the shared clock's lead over Date.now, moved by expire()
  const now = (): number => Date.now() + offset;
  const opened: FileStorage[] = [];
  const ensureDir = async (): Promise<string> => (dir ??= await mkdtemp(path.join(tmpdir(), 'agent-router-file-')));
  const make = async (extra: FileStorageOptions): Promise<FileStorage> => {
    const storage = new FileStorage(await ensureDir(), { now, ...options, ...extra });
    opened.push(storage);
    return storage;
  };
  return {
    name: 'file',
    open: () => make({}),
    openDying: async () => ({
      storage: await make({ renewLease: false }),
      expire: () => {
        offset += 31_000; // past the default 30 s lease
      },
    }),
    acceptsAnyString: true,
    locks: true,
    loadsSince: true,
    cleanup: async () => {
      for (const storage of opened) await storage.close();
      if (dir !== undefined) await rm(dir, { recursive: true, force: true });
    },
  };
}

export function postgresBackend(options: Omit<PostgresStorageOptions, 'schema'> = {}): StorageBackend {
  const schema = `ar_test_${runTag()}`;
  const pools: pg.Pool[] = [];
  const newPool = (): pg.Pool => {
    const pool = new pg.Pool({ ...PG_CONFIG, max: 6 });
    // An idle client the server ends (a lapsed lease's session) must not crash the test run.
    pool.on('error', () => undefined);
    pools.push(pool);
    return pool;
  };
  return {
    name: 'postgres',
    open: async () => postgresStorage(newPool(), { ...options, schema }),
    openDying: async () => ({
      storage: postgresStorage(newPool(), { ...options, schema, leaseSeconds: 0.5, renewLease: false }),
      expire: () => undefined,
    }),
    acceptsAnyString: false,
    locks: true,
    loadsSince: true,
    cleanup: async () => {
      const admin = pools[0] ?? newPool();
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await Promise.all(pools.map((pool) => pool.end()));
    },
  };
}

type Flavor = 'node-redis' | 'ioredis';

interface OpenClient {
  client: RedisClientLike;
  close(): Promise<void>;
}

export async function connectRedis(flavor: Flavor): Promise<OpenClient> {
  if (flavor === 'node-redis') {
    const client = createClient({ url: REDIS_URL });
    client.on('error', () => undefined);
    await client.connect();
    return { client, close: () => client.close() };
  }
  const client = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
  client.on('error', () => undefined);
  await client.connect();
  return { client, close: async () => void (await client.quit()) };
}

export function redisBackend(flavor: Flavor, options: Omit<RedisStorageOptions, 'prefix'> = {}): StorageBackend {
  const prefix = `ar-test:${runTag()}:`;
  const clients: OpenClient[] = [];
  const newClient = async (): Promise<RedisClientLike> => {
    const open = await connectRedis(flavor);
    clients.push(open);
    return open.client;
  };
  return {
    name: `redis (${flavor})`,
    open: async () => redisStorage(await newClient(), { ...options, prefix }),
    openDying: async () => ({
      storage: redisStorage(await newClient(), { ...options, prefix, leaseSeconds: 0.3, renewLease: false }),
      expire: () => undefined,
    }),
    acceptsAnyString: false,
    locks: true,
    loadsSince: true,
    cleanup: async () => {
      const admin = new Redis(REDIS_URL);
      const keys = await admin.keys(`${prefix}*`);
      if (keys.length > 0) await admin.del(...keys);
      await admin.quit();
      await Promise.all(clients.map((open) => open.close()));
    },
  };
}

/** Every backend of the contract, in the order the suite runs them. */
export function allBackends(): StorageBackend[] {
  return [memoryBackend(), fileBackend(), postgresBackend(), redisBackend('node-redis'), redisBackend('ioredis')];
}
