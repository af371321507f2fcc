/**
 * redisStorage when the connection to Redis fails around a turn's lock, on
 * the real Redis at 127.0.0.1:6379 behind a TCP proxy: the lock command's
 * reply lost, and a client that cannot reach its server when a request
 * arrives. What a user sees over HTTP: a JSON answer within turnTimeout,
 * and the agent id served again as soon as Redis answers, not a lease later.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { after, test } from 'node:test';
import type { TestContext } from 'node:test';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { COMMIT } from '../../src/storage/redis-scripts.ts';
import { redisStorage } from '../../src/storage/redis.ts';
import type { RedisClientLike } from '../../src/storage/redis.ts';
import { counterOn, echoOn, serveAgents } from '../helpers/agents.ts';
import { getJson, postJson, streamChat } from '../helpers/http.ts';
import { collectSSE } from '../helpers/sse.ts';
import { runTag } from '../helpers/storage-backends.ts';
import { tcpProxy, type ProxyLink } from '../helpers/tcp-proxy.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { listen } from '../helpers/listen.ts';
import { noTurnId } from '../helpers/turns.ts';

const admin = new Redis('redis://127.0.0.1:6379');
const prefix = `ar-test:${runTag()}:`;
after(async () => {
  const keys = await admin.keys(`${prefix}*`);
  if (keys.length > 0) await admin.del(...keys);
  await admin.quit();
});

type Flavor = 'node-redis' | 'ioredis';

/** A client of `flavor` through the proxy on `port`; closed after the test. Its 'error' events are left to the commands that meet them. */
async function clientOn(t: TestContext, flavor: Flavor, port: number, ioredisOptions: { maxRetriesPerRequest?: number | null } = {}): Promise<RedisClientLike> {
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

for (const flavor of ['node-redis', 'ioredis'] as const) {
  test(`${flavor}: a lock command whose reply is lost leaves no lock behind: the id is served again at once, not a lease later`, async (t) => {
    // Once armed, the connection carrying the next lock command is cut when its reply comes back: Redis took the lock, the client never heard.
    let armed = false;
    const cutOnReply = new WeakSet<ProxyLink>();
    const port = await tcpProxy(t, 6379, {
      toServer(bytes, link) {
        if (armed && bytes.includes(':l\r\n')) {
          armed = false;
          cutOnReply.add(link);
        }
        return true;
      },
      toClient(_bytes, link) {
        if (!cutOnReply.has(link)) return true;
        link.cut();
        return false;
      },
    });
    const storage = redisStorage(await clientOn(t, flavor, port), { prefix: `${prefix}${flavor}:lost:` });
    // turnTimeout far below the 30 s lease: a lock left behind answers the next turn 504.
    const url = await serveAgents(t, echoOn(storage), { turnTimeout: 5 });
    assert.equal((await postJson(`${url}/lou/chat`, { message: 'first' })).status, 200);

    armed = true;
    const lost = await withinWatchdog(postJson(`${url}/lou/chat`, { message: 'lost' }), 'chat whose lock reply was lost');
    assert.equal(armed, false, 'the lock command went through the armed proxy');
    // ioredis sends the command again on its new connection and is told the lock is its own; node-redis fails it (a lost connection: 503).
    if (lost.status !== 200) assert.equal(lost.body.code, 'storage_unavailable', JSON.stringify(lost.body));

    const next = await withinWatchdog(postJson(`${url}/lou/chat`, { message: 'next' }), 'the next chat');
    assert.equal(next.status, 200, JSON.stringify(next.body));
    const contents = (await storage.load('lou'))?.messages.map((message) => message.content);
    const expected = lost.status === 200 ? ['first', 'first', 'lost', 'lost', 'next', 'next'] : ['first', 'first', 'next', 'next'];
    assert.deepEqual(contents, expected);
  });
}

/** A proxy to the real Redis that can go down: its connections are cut and new ones refused, until it is up again. */
async function failingProxy(t: TestContext): Promise<{ port: number; down(): void; up(): void }> {
  let down = false;
  const links = new Set<ProxyLink>();
  const port = await tcpProxy(t, 6379, {
    accept: () => (down ? 'cut' : true),
    toServer: (_bytes, link) => {
      links.add(link);
      return true;
    },
  });
  return {
    port,
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

test('a client that cannot reach Redis (ioredis queueing commands until it reconnects): chat, stream and invoke are answered at turnTimeout, then served once Redis is back', async (t) => {
  const proxy = await failingProxy(t);
  // maxRetriesPerRequest: null, as BullMQ asks for: commands wait for the connection however long it takes.
  const client = (await clientOn(t, 'ioredis', proxy.port, { maxRetriesPerRequest: null })) as Redis;
  const storage = redisStorage(client, { prefix: `${prefix}down:` });
  const registry = new AgentRegistry();
  registry.register('counter-.*', counterOn(storage));
  registry.register('.*', echoOn(storage));
  const { url, close } = await listen(new AgentRouter(registry, { turnTimeout: 0.5, logger: { error: () => undefined } }).toRequestListener());
  t.after(close);
  assert.equal((await postJson(`${url}/known/chat`, { message: 'first' })).status, 200);
  assert.equal((await postJson(`${url}/counter-1/invoke`, { method: 'increment' })).status, 200);

  proxy.down();
  // An id this process served before (its lock command waits), and one it never loaded (its first read waits).
  for (const id of ['known', 'never-seen']) {
    const reply = await withinWatchdog(postJson(`${url}/${id}/chat`, { message: 'while down' }), `chat on ${id} while Redis is down`);
    assert.equal(reply.status, 504, JSON.stringify(reply.body));
    assert.equal(reply.body.code, 'turn_timeout');
  }
  const invoked = await withinWatchdog(postJson(`${url}/counter-1/invoke`, { method: 'increment' }), 'invoke while Redis is down');
  assert.equal(invoked.status, 504, JSON.stringify(invoked.body));
  const streamed = await withinWatchdog(streamChat(`${url}/known/chat`, 'while down').then(collectSSE), 'stream while Redis is down');
  assert.equal(streamed.events.at(-1)?.event, 'error');

  proxy.up();
  await withinWatchdog(once(client, 'ready'), 'ioredis reconnecting');
  // Commands queued while it was down run now, a lock taken for a turn that was answered already among them: it is given back.
  for (const id of ['known', 'never-seen']) {
    const reply = await withinWatchdog(postJson(`${url}/${id}/chat`, { message: 'back' }), `chat on ${id} once Redis is back`);
    assert.equal(reply.status, 200, `${id}: ${JSON.stringify(reply.body)}`);
  }
  const counted = await withinWatchdog(postJson(`${url}/counter-1/invoke`, { method: 'increment' }), 'invoke once Redis is back');
  assert.deepEqual(noTurnId(counted.body), { agent_id: 'counter-1', result: 2 }, 'the increment answered 504 changed nothing');
  assert.deepEqual((await storage.load('known'))?.messages.map((message) => message.content), ['first', 'first', 'back', 'back']);
});

test('a turn stored just before Redis became unreachable is answered 200 at once, not once Redis is back (its lock release waits in the client)', async (t) => {
  // Once armed, Redis goes down right after the commit's reply has passed: the release that follows cannot reach it.
  let armed = false;
  let down = false;
  const links = new Set<ProxyLink>();
  const commits = new WeakSet<ProxyLink>();
  const port = await tcpProxy(t, 6379, {
    accept: () => (down ? 'cut' : true),
    toServer(bytes, link) {
      links.add(link);
      if (armed && bytes.includes(COMMIT.sha)) {
        armed = false;
        commits.add(link);
      }
      return !down;
    },
    toClient(_bytes, link) {
      if (commits.has(link)) {
        commits.delete(link);
        down = true;
        setImmediate(() => {
          for (const each of links) each.cut();
        });
      }
      return true;
    },
  });
  const client = (await clientOn(t, 'ioredis', port, { maxRetriesPerRequest: null })) as Redis;
  const storage = redisStorage(client, { prefix: `${prefix}stored-then-down:` });
  const url = await serveAgents(t, echoOn(storage), { turnTimeout: 5 });
  assert.equal((await postJson(`${url}/sam/chat`, { message: 'first' })).status, 200);

  armed = true;
  const reply = await withinWatchdog(postJson(`${url}/sam/chat`, { message: 'stored' }), 'a chat stored just before Redis went down');
  assert.equal(armed, false, 'the commit went through the armed proxy');
  assert.deepEqual(noTurnId(reply.body), { agent_id: 'sam', response: 'stored' });

  down = false;
  await withinWatchdog(once(client, 'ready'), 'ioredis reconnecting');
  assert.equal((await postJson(`${url}/sam/chat`, { message: 'next' })).status, 200, 'the lock was given back once Redis was reachable');
  assert.deepEqual((await storage.load('sam'))?.messages.map((message) => message.content), ['first', 'first', 'stored', 'stored', 'next', 'next']);
});

test('GET state while Redis cannot be reached and the client waits for it (ioredis, maxRetriesPerRequest: null) is answered 504 at turnTimeout, as a turn is; then served', async (t) => {
  const proxy = await failingProxy(t);
  const client = (await clientOn(t, 'ioredis', proxy.port, { maxRetriesPerRequest: null })) as Redis;
  const url = await serveAgents(t, echoOn(redisStorage(client, { prefix: `${prefix}state-waits:` })), { turnTimeout: 0.5 });
  assert.equal((await postJson(`${url}/known/chat`, { message: 'first' })).status, 200);

  proxy.down();
  // An id this process has loaded (its version check waits) and one it never loaded (its first read waits).
  for (const id of ['known', 'never-seen']) {
    const reply = await withinWatchdog(getJson(`${url}/${id}/state`), `state of ${id} while Redis is down`);
    assert.equal(reply.status, 504, JSON.stringify(reply.body));
    assert.deepEqual(reply.body, { error: 'The state read did not complete within 0.5 s', code: 'turn_timeout' });
  }

  proxy.up();
  await withinWatchdog(once(client, 'ready'), 'ioredis reconnecting');
  assert.deepEqual((await withinWatchdog(getJson(`${url}/known/state`), 'state once Redis is back')).body, { agent_id: 'known', state: {} });
  assert.deepEqual((await withinWatchdog(getJson(`${url}/never-seen/state`), 'state once Redis is back')).body, { agent_id: 'never-seen', state: {} });
});
