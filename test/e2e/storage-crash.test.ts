/**
 * Crash safety: an AgentServer child is killed with SIGKILL in the middle of
 * turns, 20 times in a row, on FileStorage and on Postgres. After each kill
 * every agent still loads, and its history is exactly the turns committed
 * before, then every turn acknowledged to a client since, then at most the
 * one turn that was in flight (committed, its reply lost with the process):
 * nothing acknowledged is missing, nothing is torn or duplicated. Each next
 * child must make progress on the same ids, so a killed holder's locks free
 * up at once. The check waits until the killed child's Postgres sessions are
 * gone: a COMMIT the child sent just before the kill can still land after it.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import type { TestContext } from 'node:test';
import pg from 'pg';
import { FileStorage } from '../../src/storage/file.ts';
import { postgresStorage } from '../../src/storage/postgres.ts';
import type { Storage } from '../../src/storage/storage.ts';
import { assertCommits, PG_CONFIG, runTag } from '../helpers/storage-backends.ts';
import { post, seededRandom, startServerChild } from '../helpers/storage-e2e.ts';
import type { ChildConfig } from '../helpers/storage-server-child.ts';

const KILLS = 20;
const AGENTS = 4;

interface Client {
  id: string;
  next: number;
  acked: string[];
  inFlight: string | undefined;
}

/** One client per agent id, each sending its next message once the last was answered, until the server dies. */
async function converse(url: string, client: Client, firstAck: () => void): Promise<void> {
  for (;;) {
    const message = `${client.id} turn ${client.next}`;
    client.inFlight = message;
    let reply;
    try {
      reply = await post(`${url}/agent/${client.id}/chat`, { message });
    } catch {
      return; // the server was killed: this message's fate is unknown
    }
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
    assert.equal(reply.body['response'], message);
    client.acked.push(message);
    client.inFlight = undefined;
    client.next += 1;
    firstAck();
  }
}

/**
 * How a backend's children are started and when a killed one is over: a
 * Postgres backend may still run the COMMIT a child sent just before its
 * SIGKILL, so until the child's sessions are gone, its last turn may still land.
 */
interface Backend {
  config(kill: number): ChildConfig;
  open(): Storage;
  settled(kill: number): Promise<void>;
}

async function crashLoop(t: TestContext, backend: Backend): Promise<void> {
  const seed = Number(process.env['STORAGE_CRASH_SEED'] ?? Date.now() % 1_000_000);
  t.diagnostic(`seed ${seed} (replay with STORAGE_CRASH_SEED=${seed})`);
  const random = seededRandom(seed);
  const clients: Client[] = Array.from({ length: AGENTS }, (_, i) => ({ id: `crash-${i}`, next: 0, acked: [], inFlight: undefined }));
  const committed = new Map<string, string[]>(clients.map((client) => [client.id, []]));
  for (let kill = 0; kill < KILLS; kill++) {
    const server = await startServerChild(t, backend.config(kill));
    for (const client of clients) client.acked = [];
    let waitingFor = clients.length;
    let allAcked!: () => void;
    const progress = new Promise<void>((resolve) => (allAcked = resolve));
    const conversations = clients.map((client) => {
      let counted = false;
      return converse(server.url, client, () => {
        if (counted) return;
        counted = true;
        if (--waitingFor === 0) allAcked();
      });
    });
    // Every id makes progress under this child (so the killed child's locks did not hold it up), then the kill lands mid-turn.
    await Promise.race([progress, server.exited.then(() => assert.fail(`child ${kill} died on its own: ${server.stderr()}`))]);
    await new Promise((resolve) => setTimeout(resolve, Math.floor(random() * 60)));
    server.child.kill('SIGKILL');
    assert.equal((await server.exited).signal, 'SIGKILL');
    await Promise.all(conversations);
    await backend.settled(kill);

    const storage = backend.open();
    for (const client of clients) {
      const record = await storage.load(client.id);
      const messages = record?.messages ?? [];
      assert.equal(messages.length % 2, 0, `kill ${kill}, ${client.id}: whole turns only`);
      const asked: string[] = [];
      for (let i = 0; i < messages.length; i += 2) {
        assert.equal(messages[i]?.role, 'user');
        assert.deepEqual(messages[i + 1], { role: 'assistant', content: messages[i]?.content }, `kill ${kill}, ${client.id}: reply follows its question`);
        asked.push(messages[i]?.content as string);
      }
      assertCommits(record?.version, asked.length, `kill ${kill}, ${client.id}: one version per turn`);
      const before = committed.get(client.id) as string[];
      const expected = [...before, ...client.acked];
      const withInFlight = client.inFlight === undefined ? expected : [...expected, client.inFlight];
      assert.ok(
        JSON.stringify(asked) === JSON.stringify(expected) || JSON.stringify(asked) === JSON.stringify(withInFlight),
        `kill ${kill}, ${client.id}: history ${JSON.stringify(asked.slice(before.length))} is not acknowledged ${JSON.stringify(client.acked)} (+ in flight ${JSON.stringify(client.inFlight)})`,
      );
      if (asked.length === withInFlight.length) client.next += client.inFlight === undefined ? 0 : 1; // the in-flight turn landed
      committed.set(client.id, asked);
    }
    await storage.close?.();
  }
  for (const client of clients) assert.ok((committed.get(client.id) as string[]).length >= KILLS, `${client.id} progressed under every child`);
}

/** Waits until no Postgres session of that name is left (the server ends a killed client's sessions once it sees the socket close). */
async function sessionsGone(pool: pg.Pool, applicationName: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    const { rows } = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [applicationName]);
    if (rows[0]?.n === 0) return;
    if (attempt === 500) assert.fail(`Postgres sessions of ${applicationName} still open 5 s after the kill`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe('SIGKILL in the middle of turns, 20 times', { concurrency: 2 }, () => {
  test('FileStorage: every agent loads; history = committed + acknowledged (+ the one in flight)', async (t) => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'agent-router-crash-'));
    t.after(() => rm(dir, { recursive: true, force: true }));
    // A killed process's finished writes are in the file system; there is nothing else to wait for.
    await crashLoop(t, { config: () => ({ backend: 'file', dir }), open: () => new FileStorage(dir), settled: async () => undefined });
  });

  test('Postgres: every agent loads; history = committed + acknowledged (+ the one in flight)', async (t) => {
    const schema = `ar_crash_${runTag()}`;
    const pool = new pg.Pool({ ...PG_CONFIG, max: 2 });
    pool.on('error', () => undefined);
    t.after(async () => {
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    });
    const applicationName = (kill: number): string => `${schema}_${kill}`;
    await crashLoop(t, {
      config: (kill) => ({ backend: 'postgres', schema, applicationName: applicationName(kill) }),
      open: () => postgresStorage(pool, { schema }),
      settled: (kill) => sessionsGone(pool, applicationName(kill)),
    });
  });
});
