/**
 * redisStorage details beyond the shared contract, on the real Redis at
 * 127.0.0.1:6379: the key layout it documents, script loading, lease
 * renewal and compare-and-delete release, and client detection.
 */
import assert from 'node:assert/strict';
import { after, before, describe, mock, test } from 'node:test';
import type { TestContext } from 'node:test';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { Agent } from '../../src/agent/agent.ts';
import { scriptedModel } from '../../src/models/scripted.ts';
import { COMMIT } from '../../src/storage/redis-scripts.ts';
import { redisStorage } from '../../src/storage/redis.ts';
import type { RedisClientLike, RedisStorage } from '../../src/storage/redis.ts';
import { echoOn, serveAgents } from '../helpers/agents.ts';
import { postJson } from '../helpers/http.ts';
import { connectRedis, REDIS_URL, runTag } from '../helpers/storage-backends.ts';
import { tcpProxy, type ProxyLink } from '../helpers/tcp-proxy.ts';

const admin = new Redis(REDIS_URL);
const prefix = `ar-test:${runTag()}:`;
after(async () => {
  const keys = await admin.keys(`${prefix}*`);
  if (keys.length > 0) await admin.del(...keys);
  await admin.quit();
});

/** Polls (bounded by count) until `check` holds; Redis answers over the network, so a few rounds may pass. */
async function eventually(check: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await check()) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  assert.fail(`never happened: ${what}`);
}

for (const flavor of ['node-redis', 'ioredis'] as const) {
  describe(`redisStorage with ${flavor}`, () => {
    let client: RedisClientLike;
    let closeClient: () => Promise<void>;
    const own = `${prefix}${flavor}:`;
    const storage = () => redisStorage(client, { prefix: own });

    before(async () => {
      ({ client, close: closeClient } = await connectRedis(flavor));
    });
    after(() => closeClient());

    test('keys follow the documented layout: <prefix>{<id>}:v, :s, :h and :l', async () => {
      const store = storage();
      const version = await store.commit('lay/out', { expectedVersion: 0, state: { a: 1 }, append: [{ role: 'user', content: 'hi' }] });
      const unlock = await store.lock('lay/out');
      const base = `${own}{lay/out}`;
      assert.deepEqual((await admin.keys(`${own}*`)).sort(), [`${base}:h`, `${base}:l`, `${base}:s`, `${base}:v`]);
      assert.equal(await admin.get(`${base}:v`), String(version));
      assert.equal(await admin.get(`${base}:s`), '{"a":1}');
      assert.deepEqual(await admin.lrange(`${base}:h`, 0, -1), ['{"role":"user","content":"hi"}']);
      const ttl = await admin.pttl(`${base}:l`);
      assert.ok(ttl > 0 && ttl <= 30_000, `lock has a lease (${ttl} ms)`);
      await unlock();
      assert.equal(await admin.exists(`${base}:l`), 0);
      await store.delete('lay/out');
      assert.deepEqual(await admin.keys(`${own}*`), []);
    });

    test('scripts reload themselves after the server forgot them (SCRIPT FLUSH)', async () => {
      const store = storage();
      const first = await store.commit('flush', { expectedVersion: 0, state: {}, append: [] });
      await admin.script('FLUSH');
      assert.equal(await store.commit('flush', { expectedVersion: first, state: { after: true }, append: [] }), first + 1);
      await admin.script('FLUSH');
      assert.deepEqual((await store.load('flush'))?.state, { after: true });
    });

    test('a script error other than NOSCRIPT reaches the caller', async () => {
      const store = storage();
      await admin.lpush(`${own}{wrong}:v`, 'not a string');
      await assert.rejects(store.commit('wrong', { expectedVersion: 0, state: {}, append: [] }), /WRONGTYPE/);
      await admin.del(`${own}{wrong}:v`);
    });

    test('a held lease is renewed every third of it; a renewal that finds the lock taken stops', async (t) => {
      mock.timers.enable({ apis: ['setInterval'] });
      t.after(() => mock.timers.reset());
      const store = redisStorage(client, { prefix: own, leaseSeconds: 60 });
      const unlock = await store.lock('renew');
      const key = `${own}{renew}:l`;
      await admin.pexpire(key, 1_000); // as if the lease had nearly run out
      mock.timers.tick(20_000);
      await eventually(async () => (await admin.pttl(key)) > 30_000, 'the lease extended back to 60 s');
      const theirs = 'another-holder';
      await admin.set(key, theirs, 'PX', 5_000);
      mock.timers.tick(20_000);
      mock.timers.tick(20_000);
      await unlock(); // compare-and-delete: not ours any more, so left alone
      assert.equal(await admin.get(key), theirs);
      assert.ok((await admin.pttl(key)) <= 5_000, 'their lease was not extended by our timer');
      await admin.del(key);
    });

    test('a turn whose lease ran out mid-turn is refused at commit (lock_lost), even before the next holder commits', async () => {
      const store = storage();
      const unlock = await store.lock('lapsed');
      const first = await store.commit('lapsed', { expectedVersion: 0, state: { n: 1 }, append: [] });
      assert.equal(await admin.get(`${own}{lapsed}:v`), String(first));
      // The lease ran out and another process took the lock, but has not committed yet.
      await admin.set(`${own}{lapsed}:l`, 'the-next-holder', 'PX', 5_000);
      await assert.rejects(store.commit('lapsed', { expectedVersion: first, state: { n: 2 }, append: [] }), { code: 'lock_lost', status: 409 });
      assert.equal(await admin.get(`${own}{lapsed}:v`), String(first), 'nothing was written');
      await unlock();
      await admin.del(`${own}{lapsed}:l`);
      // Without a lock of its own, a commit is checked on the version alone, as before.
      assert.equal(await storage().commit('lapsed', { expectedVersion: first, state: { n: 2 }, append: [] }), first + 1);
    });

    test('a commit run twice under one lock (a re-sent command whose reply was lost) is applied once and succeeds both times', async () => {
      const store = storage();
      const unlock = await store.lock('replayed');
      // A record's first version is drawn per call (record-version.ts), so a second call is no replay of a first
      // commit (a client re-sending the command sends the same one); the replay is of the commit after it.
      const first = await store.commit('replayed', { expectedVersion: 0, state: { n: 0 }, append: [] });
      const turn = { expectedVersion: first, state: { n: 1 }, append: [{ role: 'user' as const, content: 'once' }] };
      assert.equal(await store.commit('replayed', turn), first + 1);
      assert.equal(await store.commit('replayed', turn), first + 1, 'the replay answers as the commit did');
      assert.deepEqual((await store.load('replayed'))?.messages.map((m) => m.content), ['once'], 'written once');
      await assert.rejects(store.commit('replayed', { ...turn, state: { n: 2 } }), { code: 'version_conflict' }, 'another turn is still refused');
      await unlock();
      await assert.rejects(storage().commit('replayed', turn), { code: 'version_conflict' }, 'without the lock, no replay is assumed');
    });

    test('close() releases held locks', async () => {
      const store = storage();
      await store.lock('closing');
      await store.close();
      assert.equal(await admin.exists(`${own}{closing}:l`), 0);
      await (await storage().lock('closing', AbortSignal.timeout(10_000)))();
    });
  });
}

/**
 * A proxy to the real Redis that, once armed, lets the next commit script call
 * through and closes the client's connection instead of passing its
 * reply back: the script ran, and its reply is lost.
 */
async function replyDroppingProxy(t: TestContext): Promise<{ url: string; arm(): void; armed(): boolean }> {
  let armed = false;
  const dropNextReply = new WeakSet<ProxyLink>();
  const port = await tcpProxy(t, 6379, {
    toServer(bytes, link) {
      // The commit script by its SHA1 (the lock is a script too); loaded by an earlier commit, so never sent as EVAL here.
      if (armed && bytes.includes(COMMIT.sha)) {
        armed = false;
        dropNextReply.add(link);
      }
      return true;
    },
    toClient(_bytes, link) {
      if (!dropNextReply.has(link)) return true;
      link.cut();
      return false;
    },
  });
  return { url: `redis://127.0.0.1:${port}`, arm: () => (armed = true), armed: () => armed };
}

/** A connected node-redis client; its 'error' events (a cut connection) are left to the commands that meet them. */
async function connectNodeRedis(url: string, options: { disableOfflineQueue?: boolean } = {}) {
  const client = createClient({ url, ...options });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

/** Commits a turn of `id` under its lock with the proxy armed, so that its reply is lost: it is reported committed, and stored once. */
async function assertLostReplyCommittedOnce(store: RedisStorage, proxy: { arm(): void; armed(): boolean }, id: string): Promise<void> {
  const first = await store.commit(id, { expectedVersion: 0, state: { n: 0 }, append: [] });
  const unlock = await store.lock(id);
  proxy.arm();
  const version = await store.commit(id, { expectedVersion: first, state: { n: 1 }, append: [{ role: 'user', content: 'once' }] });
  assert.equal(proxy.armed(), false, 'the commit went through the proxy armed');
  await unlock();
  assert.equal(version, first + 1);
  assert.deepEqual(await store.load(id), { version: first + 1, state: { n: 1 }, messages: [{ role: 'user', content: 'once' }] });
}

test('a commit whose reply is lost (the connection closes after the script ran) is reported as committed, and applied once', async (t) => {
  const proxy = await replyDroppingProxy(t);
  const client = await connectNodeRedis(proxy.url);
  t.after(() => client.close());
  await assertLostReplyCommittedOnce(redisStorage(client, { prefix: `${prefix}lost-reply:` }), proxy, 'ann');
});

test('a lost commit reply on a client that does not queue while offline (disableOfflineQueue) is still answered as committed: 200, and stored once', async (t) => {
  const proxy = await replyDroppingProxy(t);
  // Fails fast while reconnecting instead of queueing: the commit's second try is refused at once.
  const client = await connectNodeRedis(proxy.url, { disableOfflineQueue: true });
  t.after(() => client.destroy());
  const url = await serveAgents(t, echoOn(redisStorage(client, { prefix: `${prefix}offline:` })));
  assert.equal((await postJson(`${url}/ida/chat`, { message: 'first' })).status, 200);

  proxy.arm();
  const reply = await postJson(`${url}/ida/chat`, { message: 'once' });
  assert.equal(proxy.armed(), false, 'the commit went through the proxy armed');
  assert.equal(reply.status, 200, JSON.stringify(reply.body));
  const stored = await redisStorage(admin, { prefix: `${prefix}offline:` }).load('ida');
  assert.deepEqual(stored?.messages.map((message) => message.content), ['first', 'first', 'once', 'once']);
});

test('a lost commit reply on ioredis that gives up resending (maxRetriesPerRequest: 0) is still answered as committed while it reconnects, and stored once', async (t) => {
  const proxy = await replyDroppingProxy(t);
  // Rejects the lost command itself while it reconnects (status 'reconnecting'): redisStorage runs it again.
  const client = new Redis(proxy.url, { maxRetriesPerRequest: 0 });
  client.on('error', () => undefined);
  t.after(() => client.disconnect());
  await assertLostReplyCommittedOnce(redisStorage(client, { prefix: `${prefix}io-lost:` }), proxy, 'ivy');
});

/** A fresh client of `flavor` and the way its owner closes it for good. */
const closings = [
  ...(['close', 'quit', 'destroy'] as const).map((how) => ({
    name: `node-redis ${how}()`,
    open: async () => {
      const client = await connectNodeRedis(REDIS_URL);
      return { client, method: 'sendCommand' as const, close: async () => void (await client[how]()) };
    },
  })),
  ...(['quit', 'disconnect'] as const).map((how) => ({
    name: `ioredis ${how}()`,
    open: async () => {
      const client = new Redis(REDIS_URL);
      client.on('error', () => undefined);
      return { client, method: 'call' as const, close: async () => void (await client[how]()) };
    },
  })),
];

for (const closing of closings) {
  test(`a turn whose client is closed for good (${closing.name}, as at shutdown) fails with the client's error at once, not after retrying its commit for the whole lease`, async (t) => {
    const { client, method, close } = await closing.open();
    // Its own prefix: the lock this turn leaves (its release cannot be sent) is not waited out by the next test.
    const store = redisStorage(client, { prefix: `${prefix}closed-${closing.name}:`, leaseSeconds: 2 });
    const sends = mock.method(client as unknown as Record<string, (...args: unknown[]) => unknown>, method);
    let closedAt = -1;
    class Bot extends Agent {
      constructor(id: string) {
        super(id, {
          model: scriptedModel(async () => {
            await close();
            closedAt = sends.mock.callCount();
            return 'bye';
          }),
          storage: store,
        });
      }
    }
    const logged: unknown[] = [];
    const url = await serveAgents(t, Bot, { logger: { error: (_message: string, error: unknown) => logged.push(error) } });
    const reply = await postJson(`${url}/cid/chat`, { message: 'hi' });
    // A client closed is a storage that cannot be reached: 503, the client's own error as its cause.
    assert.equal(reply.status, 503, JSON.stringify(reply.body));
    assert.equal(reply.body.code, 'storage_unavailable');
    assert.match(String((logged[0] as Error).cause), /closed/i, 'the client\'s own error is what failed the turn');
    const commits = sends.mock.calls.slice(closedAt).filter(({ arguments: args }) => args.flat().includes(COMMIT.sha));
    assert.equal(commits.length, 1, 'the commit was sent once after the client closed, not retried');
  });
}

test('keys damaged by hand are refused on every read as storage_corrupt, naming the agent and what is wrong', async (t) => {
  const client = new Redis(REDIS_URL);
  t.after(() => client.quit());
  const own = `${prefix}damaged:`;
  const store = redisStorage(client, { prefix: own });
  const version = await store.commit('dot', { expectedVersion: 0, state: { n: 1 }, append: [{ role: 'user', content: 'hi' }] });
  const base = `${own}{dot}`;
  const damages: Array<[() => Promise<unknown>, RegExp]> = [
    [() => admin.set(`${base}:v`, 'abc'), /its version \(NaN\) is not an integer/],
    [() => admin.set(`${base}:s`, 'not json'), /its state or a history entry is not JSON/],
    [() => admin.set(`${base}:s`, 'null'), /its state is not a JSON object/],
    [() => admin.rpush(`${base}:h`, '42'), /history entry 1 is not a \{role, content\} message/],
  ];
  for (const [damage, what] of damages) {
    await admin.set(`${base}:v`, String(version));
    await admin.set(`${base}:s`, '{}');
    await admin.ltrim(`${base}:h`, 0, 0);
    await damage();
    await assert.rejects(store.load('dot'), (error: Error & { code?: string }) => {
      assert.equal(error.code, 'storage_corrupt');
      assert.match(error.message, /agent "dot"/);
      assert.match(error.message, what);
      return true;
    });
  }
});

test('redisStorage refuses what is not a Redis client, and bad options, with the fix in the message', () => {
  assert.throws(() => redisStorage({} as never), /node-redis client .* or an ioredis client/);
  assert.throws(() => redisStorage(null as never), TypeError);
  const fake: RedisClientLike = { sendCommand: async () => null };
  assert.throws(() => redisStorage(fake, { leaseSeconds: -1 }), /leaseSeconds/);
  assert.throws(() => redisStorage(fake, { prefix: 5 as never }), /prefix must be a string/);
});

test('redisStorage accepts any object with call() or sendCommand() (the documented shape)', async () => {
  const sent: string[][] = [];
  const viaCall = redisStorage({ call: async (...args: string[]) => (sent.push(args), '7') });
  assert.equal(await viaCall.head('x'), 7);
  const viaSend = redisStorage({ sendCommand: async (args: string[]) => (sent.push(args), null) });
  assert.equal(await viaSend.head('x'), 0);
  assert.deepEqual(sent, [['GET', 'agent-router:{x}:v'], ['GET', 'agent-router:{x}:v']]);
});
