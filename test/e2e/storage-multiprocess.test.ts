/**
 * Several processes, one agent id: three AgentServer processes share one
 * Postgres (then one Redis, through node-redis and ioredis at once), and 300
 * concurrent chats on one id are spread across them. Every turn must land
 * exactly once and whole (600 messages, each reply right after its own
 * question), and concurrent counter actions must sum exactly.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { TestContext } from 'node:test';
import pg from 'pg';
import { Redis } from 'ioredis';
import { postgresStorage } from '../../src/storage/postgres.ts';
import { redisStorage } from '../../src/storage/redis.ts';
import type { Storage } from '../../src/storage/storage.ts';
import type { ChatMessage } from '../../src/types.ts';
import { assertCommits, PG_CONFIG, REDIS_URL, runTag } from '../helpers/storage-backends.ts';
import { post, startServerChild } from '../helpers/storage-e2e.ts';
import type { ChildConfig } from '../helpers/storage-server-child.ts';

const CHATS = 300;
const INCREMENTS = 90;

async function hammer(t: TestContext, configs: ChildConfig[], storage: Storage): Promise<void> {
  const children = await Promise.all(configs.map((config) => startServerChild(t, config)));
  const urls = children.map((child) => child.url);
  const chatId = 'shared-chat';
  const counterId = 'counter-shared';

  const messages = Array.from({ length: CHATS }, (_, i) => `message ${i} from client ${i % 7}`);
  const bys = Array.from({ length: INCREMENTS }, (_, i) => (i % 4) + 1);
  const [chats, increments] = await Promise.all([
    Promise.all(messages.map((message, i) => post(`${urls[i % urls.length]}/agent/${chatId}/chat`, { message }))),
    Promise.all(bys.map((by, i) => post(`${urls[(i + 1) % urls.length]}/agent/${counterId}/invoke`, { method: 'increment', params: { by } }))),
  ]);

  for (const [i, reply] of chats.entries()) {
    assert.equal(reply.status, 200, `chat ${i}: ${JSON.stringify(reply.body)}`);
    assert.equal(reply.body['response'], messages[i]);
  }
  const record = await storage.load(chatId);
  assert.ok(record);
  assertCommits(record.version, CHATS, 'one commit per chat');
  assert.equal(record.messages.length, CHATS * 2);
  const seen = new Set<string>();
  for (let i = 0; i < record.messages.length; i += 2) {
    const question = record.messages[i] as ChatMessage;
    const answer: ChatMessage | undefined = record.messages[i + 1];
    assert.equal(question.role, 'user', `message ${i} is a question`);
    assert.deepEqual(answer, { role: 'assistant', content: question.content }, `message ${i + 1} answers message ${i}`);
    assert.ok(!seen.has(question.content), `${question.content} landed twice`);
    seen.add(question.content);
  }
  assert.deepEqual([...seen].sort(), [...messages].sort(), 'every chat landed, none lost');

  const total = bys.reduce((sum, by) => sum + by, 0);
  for (const reply of increments) assert.equal(reply.status, 200, JSON.stringify(reply.body));
  const results = increments.map((reply) => reply.body['result'] as number);
  assert.equal(new Set(results).size, INCREMENTS, 'each increment saw the one before it (no two read the same count)');
  assert.equal(Math.max(...results), total);
  const counter = await storage.load(counterId);
  assert.deepEqual(counter?.state, { count: total });
  assertCommits(counter?.version, INCREMENTS, 'one commit per increment');
  // Every process serves the same, newest state (none serves a stale copy).
  for (const url of urls) {
    const res = await fetch(`${url}/agent/${counterId}/state`);
    assert.deepEqual(((await res.json()) as { state: unknown }).state, { count: total });
  }

  for (const child of children) child.child.kill('SIGTERM');
  const exits = await Promise.all(children.map((child) => child.exited));
  for (const [i, exit] of exits.entries()) assert.equal(exit.code, 0, `child ${i} closed cleanly: ${children[i]?.stderr()}`);
}

test('three AgentServer processes sharing Postgres: 300 concurrent chats on one id land once each, in pairs', async (t) => {
  const schema = `ar_e2e_${runTag()}`;
  const pool = new pg.Pool({ ...PG_CONFIG, max: 2 });
  t.after(async () => {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool.end();
  });
  const storage = postgresStorage(pool, { schema });
  await storage.head('create-tables-first'); // one process makes the schema; the children find it
  await hammer(t, Array.from({ length: 3 }, () => ({ backend: 'postgres' as const, schema })), storage);
});

test('three AgentServer processes sharing Redis (node-redis and ioredis together): 300 concurrent chats land once each', async (t) => {
  const prefix = `ar-e2e:${runTag()}:`;
  const client = new Redis(REDIS_URL);
  t.after(async () => {
    const keys = await client.keys(`${prefix}*`);
    if (keys.length > 0) await client.del(...keys);
    await client.quit();
  });
  const configs: ChildConfig[] = [
    { backend: 'node-redis', prefix },
    { backend: 'node-redis', prefix },
    { backend: 'ioredis', prefix },
  ];
  await hammer(t, configs, redisStorage(client, { prefix }));
});
