/**
 * Per-turn write cost of each storage backend at history length 10 versus
 * 1,000 (issue 5's goal: the turn at 1,000 costs at most 1.2x the turn at 10).
 *
 *   npx tsx scripts/bench-storage.ts [agents] [rounds]
 *
 * What runs: for each backend, `agents` (default 20) agents with a history of
 * 10 messages and as many with 1,000 (built from 10 commits of 100 messages:
 * what matters to a write is the stored size, rows or bytes, not how it got
 * there). Then `rounds` (default 12) rounds; each round times, per agent
 * pair, one write on the short agent then one on the long one (alternating,
 * A B A B, because this machine is shared and noisy). Two writes are timed:
 *   - commit: `storage.commit` of one turn (a user and an assistant message
 *     of 200 characters each, a small state), as the Agent writes it;
 *   - turn: what the Agent does around it: lock, head, commit, unlock.
 * The first round is a warm-up and is not counted; medians are printed, with
 * the ratio long/short. Histories grow by 2 messages per round (10 -> ~34,
 * 1,000 -> ~1,024).
 *
 * Backends: memory; file with fsync (the default) and without; Postgres
 * (127.0.0.1:5432, database `test`, a schema made and dropped here); Redis
 * (127.0.0.1:6379, node-redis and ioredis, a key prefix deleted afterwards).
 * What it ignores: loads (a live agent loads once), compaction (it runs in
 * the background and only when superseded states outweigh the journal),
 * the model, HTTP.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { createClient } from 'redis';
import { Redis } from 'ioredis';
import { FileStorage } from '../src/storage/file.ts';
import { MemoryStorage } from '../src/storage/memory.ts';
import { postgresStorage } from '../src/storage/postgres.ts';
import { redisStorage } from '../src/storage/redis.ts';
import type { Storage } from '../src/storage/storage.ts';
import type { ChatMessage } from '../src/types.ts';

const agents = Number(process.argv[2] ?? 20);
const rounds = Number(process.argv[3] ?? 12);
const tag = `${process.pid}_${randomBytes(3).toString('hex')}`;

interface Backend {
  name: string;
  storage: Storage;
  cleanup: () => Promise<void>;
}

async function backends(): Promise<Backend[]> {
  const list: Backend[] = [{ name: 'memory', storage: new MemoryStorage(), cleanup: async () => undefined }];
  for (const fsync of [true, false]) {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'bench-storage-'));
    const storage = new FileStorage(dir, { fsync });
    list.push({ name: `file (fsync ${fsync ? 'on' : 'off'})`, storage, cleanup: async () => {
      await storage.close();
      await rm(dir, { recursive: true, force: true });
    } });
  }
  const pool = new pg.Pool({ host: '127.0.0.1', database: 'test', user: 'postgres', max: 4 });
  const schema = `bench_${tag}`;
  list.push({ name: 'postgres', storage: postgresStorage(pool, { schema }), cleanup: async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  } });
  const prefix = `bench:${tag}:`;
  const nodeRedis = createClient({ url: 'redis://127.0.0.1:6379' });
  await nodeRedis.connect();
  const ioredis = new Redis('redis://127.0.0.1:6379');
  list.push({ name: 'redis (node-redis)', storage: redisStorage(nodeRedis, { prefix: `${prefix}n:` }), cleanup: async () => {
    await nodeRedis.close();
  } });
  list.push({ name: 'redis (ioredis)', storage: redisStorage(ioredis, { prefix: `${prefix}i:` }), cleanup: async () => {
    const keys = await ioredis.keys(`${prefix}*`);
    if (keys.length > 0) await ioredis.del(...keys);
    await ioredis.quit();
  } });
  return list;
}

const text = (n: number): string => `${'lorem ipsum '.repeat(17)}${n}`.slice(0, 200);
const pair = (n: number): ChatMessage[] => [{ role: 'user', content: text(n) }, { role: 'assistant', content: text(n + 1) }];

async function seed(storage: Storage, id: string, messages: number): Promise<number> {
  const perCommit = Math.min(100, messages);
  let version = 0;
  for (let done = 0; done < messages; done += perCommit) {
    const append = Array.from({ length: perCommit }, (_, i): ChatMessage => ({ role: i % 2 === 0 ? 'user' : 'assistant', content: text(done + i) }));
    version = await storage.commit(id, { expectedVersion: version, state: { count: version }, append });
  }
  return version;
}

async function timeCommit(storage: Storage, id: string, version: number): Promise<[number, number]> {
  const start = process.hrtime.bigint();
  const next = await storage.commit(id, { expectedVersion: version, state: { count: version + 1, note: 'small state' }, append: pair(version) });
  return [Number(process.hrtime.bigint() - start) / 1e6, next];
}

async function timeTurn(storage: Storage, id: string, version: number): Promise<[number, number]> {
  const start = process.hrtime.bigint();
  const unlock = await storage.lock?.(id);
  const head = (await storage.head?.(id)) ?? version;
  const next = await storage.commit(id, { expectedVersion: head, state: { count: head + 1, note: 'small state' }, append: pair(head) });
  await unlock?.();
  return [Number(process.hrtime.bigint() - start) / 1e6, next];
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};

async function measure(backend: Backend): Promise<string[]> {
  const { storage } = backend;
  const short = Array.from({ length: agents }, (_, i) => `short-${i}`);
  const long = Array.from({ length: agents }, (_, i) => `long-${i}`);
  const versions = new Map<string, number>();
  for (const id of short) versions.set(id, await seed(storage, id, 10));
  for (const id of long) versions.set(id, await seed(storage, id, 1000));
  const samples = { commit: { short: [] as number[], long: [] as number[] }, turn: { short: [] as number[], long: [] as number[] } };
  for (let round = 0; round < rounds; round++) {
    for (const kind of ['commit', 'turn'] as const) {
      const run = kind === 'commit' ? timeCommit : timeTurn;
      for (let i = 0; i < agents; i++) {
        for (const [group, id] of [['short', short[i]], ['long', long[i]]] as const) {
          const [ms, version] = await run(storage, id as string, versions.get(id as string) as number);
          versions.set(id as string, version);
          if (round > 0) samples[kind][group].push(ms);
        }
      }
    }
  }
  const cells: string[] = [backend.name];
  for (const kind of ['commit', 'turn'] as const) {
    const a = median(samples[kind].short);
    const b = median(samples[kind].long);
    cells.push(a.toFixed(3), b.toFixed(3), (b / a).toFixed(2));
  }
  return cells;
}

const header = ['backend', 'commit@10 ms', 'commit@1000 ms', 'ratio', 'turn@10 ms', 'turn@1000 ms', 'ratio'];
console.log(`bench-storage: node ${process.version}, ${os.cpus().length} cpus, load ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
console.log(`${agents} agents per history length, ${rounds - 1} counted rounds (${agents * (rounds - 1)} samples per cell), medians\n`);
const rows: string[][] = [header];
for (const backend of await backends()) {
  try {
    rows.push(await measure(backend));
  } finally {
    await backend.cleanup();
  }
  process.stderr.write(`  done: ${backend.name}\n`);
}
const widths = header.map((_, col) => Math.max(...rows.map((row) => (row[col] as string).length)));
for (const row of rows) console.log(row.map((cell, col) => (col === 0 ? cell.padEnd(widths[col] as number) : cell.padStart(widths[col] as number))).join('  '));
console.log('\nratio = median at 1,000 / median at 10; the goal is <= 1.2. Absolute times depend on this machine\'s load.');
