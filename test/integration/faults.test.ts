import assert from 'node:assert/strict';
import type { RequestListener } from 'node:http';
import net from 'node:net';
import { test } from 'node:test';
import express from 'express5';
import { toExpress } from '../../src/adapters/express.ts';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouterError } from '../../src/errors.ts';
import { AgentRouter, type AgentRouterOptions } from '../../src/router/router.ts';
import { scriptedModel, type ScriptedFunction } from '../../src/models/scripted.ts';
import { AgentRegistry, type AgentClass } from '../../src/registry/registry.ts';
import { AgentServer } from '../../src/server/server.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import type { JsonObject } from '../../src/types.ts';
import { deferred, getJson, postJson, streamChat, type JsonReply } from '../helpers/http.ts';
import { listen } from '../helpers/listen.ts';
import { collectSSE } from '../helpers/sse.ts';

type After = { after: (fn: () => Promise<void> | void) => void };

/** Serves `target` for every id; collects what the router logs (5xx details). */
async function serve(t: After, target: AgentClass, options: AgentRouterOptions = {}, wrap?: (listener: RequestListener, router: AgentRouter) => RequestListener) {
  const registry = new AgentRegistry();
  registry.register('.*', target);
  const logged: unknown[] = [];
  const router = new AgentRouter(registry, { pingInterval: 0, logger: { error: (_message, error) => logged.push(error) }, ...options });
  const { url, close } = await listen(wrap === undefined ? router.toRequestListener() : wrap(router.toRequestListener(), router));
  t.after(close);
  return { url, router, logged };
}

function modelAgent(model: ScriptedFunction): AgentClass {
  const storage = new MemoryStorage();
  return class extends Agent {
    constructor(id: string) {
      super(id, { model: scriptedModel(model), storage });
    }
  };
}

/**
 * A POST that must be answered within `ms`: a turn that hangs past its
 * timeout fails the test with a message instead of stalling the suite.
 */
async function postWithin(url: string, body: unknown, ms = 5000): Promise<JsonReply> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(ms),
  }).catch((error: unknown) => assert.fail(`no answer within ${ms} ms: ${String(error)}`));
  return { status: res.status, headers: res.headers, body: await res.json() };
}

const INTERNAL = { error: 'Internal error', code: 'internal_error' };

test('a model that throws fails its own request only; other agents and the next turn are served', async (t) => {
  let turn = 0;
  const { url, router, logged } = await serve(t, modelAgent(({ messages }) => {
    if (messages.at(-1)?.content === 'fail') throw new Error(`model broke, turn ${turn++}, secret s3cr3t`);
    return `ok: ${messages.at(-1)?.content}`;
  }));
  const [failed, other] = await Promise.all([postJson(`${url}/a/chat`, { message: 'fail' }), postJson(`${url}/b/chat`, { message: 'meanwhile' })]);
  assert.equal(failed.status, 500);
  assert.deepEqual(failed.body, INTERNAL);
  assert.equal(other.body.response, 'ok: meanwhile');
  const stream = await collectSSE(await streamChat(`${url}/a/chat`, 'fail'));
  assert.deepEqual(stream.events.map((e) => [e.event, e.data]), [['error', JSON.stringify(INTERNAL)]]);
  assert.equal((await postJson(`${url}/a/chat`, { message: 'next' })).body.response, 'ok: next');
  assert.deepEqual(router.pool?.peek('a')?.messages.map((m) => m.content), ['next', 'ok: next'], 'the failed turns left no trace');
  assert.equal(logged.length, 2, 'each failure is logged with its details');
  assert.match(String(logged[0]), /s3cr3t/);
});

test('an action that throws fails that call only; state is unchanged and the next call works', async (t) => {
  class Counter extends Agent<{ count: number }> {
    static override actions = ['increment', 'explode'];
    constructor(id: string) {
      super(id, { storage: new MemoryStorage(), initialState: { count: 0 } });
    }
    async increment(): Promise<number> {
      await this.setState({ count: this.state.count + 1 });
      return this.state.count;
    }
    async explode(): Promise<never> {
      await this.setState({ count: 1000 });
      throw new TypeError('undefined is not a function (in the action)');
    }
  }
  const { url } = await serve(t, Counter);
  assert.deepEqual((await postJson(`${url}/c/invoke`, { method: 'explode' })).body, INTERNAL);
  assert.equal((await postJson(`${url}/c/invoke`, { method: 'increment' })).body.result, 1);
  assert.deepEqual((await getJson(`${url}/c/state`)).body.state, { count: 1 });
});

test('a model that stalls but honours its signal is cut at turnTimeout: 504 JSON, event: error on a stream; the next turn works', async (t) => {
  const { url, router } = await serve(
    t,
    modelAgent(async function* ({ messages, signal }) {
      if (messages.at(-1)?.content !== 'stall') return yield 'fine';
      yield 'started ';
      await new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason), { once: true }));
    }),
    { turnTimeout: 0.05 },
  );
  const json = await postWithin(`${url}/s/chat`, { message: 'stall' });
  assert.equal(json.status, 504);
  assert.deepEqual(json.body, { error: "The turn did not complete within 0.05 s (waiting behind the agent's earlier turns included)", code: 'turn_timeout' });
  const { events } = await collectSSE(await streamChat(`${url}/s/chat`, 'stall'));
  assert.deepEqual(events.map((e) => e.event), ['message', 'error']);
  assert.equal(JSON.parse(events[1]?.data ?? '').code, 'turn_timeout');
  assert.equal((await postWithin(`${url}/s/chat`, { message: 'go' })).body.response, 'fine');
  assert.deepEqual(router.pool?.peek('s')?.messages.map((m) => m.content), ['go', 'fine']);
});

test('a model that ignores its abort signal is still cut at turnTimeout, and the agent serves the next turn', async (t) => {
  let turn = 0;
  const { url } = await serve(t, modelAgent(() => (turn++ === 0 ? new Promise<string>(() => {}) : 'next turn')), { turnTimeout: 0.05 });
  const first = await postWithin(`${url}/deaf/chat`, { message: 'x' });
  assert.equal(first.status, 504);
  assert.equal(first.body.code, 'turn_timeout');
  assert.equal((await postWithin(`${url}/deaf/chat`, { message: 'again' })).body.response, 'next turn');
});

test('an action that never settles is cut at turnTimeout, and the agent serves the next call', async (t) => {
  class Stuck extends Agent {
    static override actions = ['wait', 'ping'];
    wait(): Promise<never> {
      return new Promise<never>(() => {});
    }
    ping(): string {
      return 'pong';
    }
  }
  const { url } = await serve(t, Stuck, { turnTimeout: 0.05 });
  assert.equal((await postWithin(`${url}/w/invoke`, { method: 'wait' })).status, 504);
  assert.equal((await postWithin(`${url}/w/invoke`, { method: 'ping' })).body.result, 'pong');
});

test('an action that calls chat() on its own agent is cut at turnTimeout, and the agent id serves the next call and chat', async (t) => {
  const storage = new MemoryStorage();
  class SelfChat extends Agent {
    static override actions = ['ask', 'ping'];
    constructor(id: string) {
      super(id, { model: scriptedModel(({ messages }) => `re: ${messages.at(-1)?.content}`), storage });
    }
    ask(): Promise<string> {
      return this.chat('from inside'); // waits for its own turn: a deadlock the README warns of
    }
    ping(): string {
      return 'pong';
    }
  }
  const { url } = await serve(t, SelfChat, { turnTimeout: 0.05 });
  assert.equal((await postWithin(`${url}/me/invoke`, { method: 'ask' })).status, 504);
  // The cut action's chat still waits on the instance: the next requests get a fresh one, not 504s forever.
  assert.equal((await postWithin(`${url}/me/invoke`, { method: 'ping' })).body.result, 'pong');
  assert.equal((await postWithin(`${url}/me/chat`, { message: 'hello' })).body.response, 're: hello');
  assert.deepEqual((await storage.load('me'))?.messages.map((message) => message.content), ['hello', 're: hello']);
});

test('turnTimeout counts from when a request asks for its turn: one waiting behind a stuck action is answered 504 without its turn starting', async (t) => {
  let modelCalls = 0;
  class Stuck extends Agent {
    static override actions = ['wait'];
    constructor(id: string) {
      super(id, { storage: new MemoryStorage(), model: scriptedModel(() => `call ${++modelCalls}`) });
    }
    wait(): Promise<never> {
      return new Promise<never>(() => {});
    }
  }
  // A single-agent router keeps its one instance, so its next turns wait for the abandoned action.
  const { url, close } = await listen(new AgentRouter(new Stuck('solo'), { turnTimeout: 0.2, logger: { error: () => {} } }).toRequestListener());
  t.after(close);
  assert.equal((await postWithin(`${url}/invoke`, { method: 'wait' })).status, 504);
  const queued = await postWithin(`${url}/chat`, { message: 'behind the stuck action' });
  assert.deepEqual(queued.body, { error: "The turn did not complete within 0.2 s (waiting behind the agent's earlier turns included)", code: 'turn_timeout' });
  assert.equal(modelCalls, 0);
});

test('an action abandoned at turnTimeout cannot change state when it carries on later', async (t) => {
  const gate = deferred();
  const finished = deferred();
  class Deaf extends Agent<{ n: number }> {
    static override actions = ['slow'];
    constructor(id: string) {
      super(id, { storage: new MemoryStorage(), initialState: { n: 0 } });
    }
    async slow(): Promise<string> {
      try {
        await this.setState({ n: 1 });
        await gate.promise; // ignores its signal
        await this.setState({ n: 2 });
        return 'done';
      } finally {
        finished.resolve();
      }
    }
  }
  const { url } = await serve(t, Deaf, { turnTimeout: 0.05 });
  assert.equal((await postWithin(`${url}/late/invoke`, { method: 'slow' })).status, 504);
  gate.resolve();
  await finished.promise;
  assert.deepEqual((await getJson(`${url}/late/state`)).body.state, { n: 0 }, 'the abandoned turn changed nothing, then or later');
});

test('a turn queued behind a cut action starts once that action ended: its late setState cannot join the next turn', async (t) => {
  const zombieGate = deferred();
  const nextGate = deferred();
  class Slow extends Agent<{ count: number }> {
    static override actions = ['slowSet', 'add'];
    constructor(id: string) {
      super(id, { storage: new MemoryStorage(), initialState: { count: 0 } });
    }
    async slowSet(): Promise<void> {
      await zombieGate.promise; // cannot see its turn was cut
      await this.setState((state) => ({ count: state.count + 1000 }));
    }
    async add(): Promise<number> {
      await nextGate.promise;
      await this.setState((state) => ({ count: state.count + 1 }));
      return this.state.count;
    }
  }
  let asked = 0;
  const { url, router } = await serve(t, Slow, { authorize: () => ++asked > 0 });
  const until = async (condition: () => boolean): Promise<void> => {
    while (!condition()) await new Promise((resolve) => setTimeout(resolve, 2));
  };
  const client = new AbortController();
  const cut = fetch(`${url}/z/invoke`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"method":"slowSet"}', signal: client.signal });
  cut.catch(() => {});
  await until(() => router.pool?.peek('z')?.busy === true);
  // Queued on the same instance while the first turn runs.
  const next = postWithin(`${url}/z/invoke`, { method: 'add' });
  await until(() => asked === 2);
  await new Promise((resolve) => setTimeout(resolve, 50));
  client.abort(); // the client leaves: the first turn is cut, its action runs on
  await until(() => router.pool?.peek('z')?.abandoned === true);
  zombieGate.resolve(); // and calls setState
  await new Promise((resolve) => setTimeout(resolve, 20));
  nextGate.resolve();
  const reply = await next;
  assert.equal(reply.status, 200);
  assert.equal(reply.body.result, 1, 'the next turn saw none of the cut action\'s change');
  assert.deepEqual((await getJson(`${url}/z/state`)).body.state, { count: 1 });
});

test('a model yielding a non-string chunk mid-stream ends that stream with event: error; the next turn works', async (t) => {
  let turn = 0;
  const bad: unknown[] = [{ text: 'an object' }, null, 7n];
  const { url, router } = await serve(t, modelAgent(async function* () {
    const n = turn++;
    if (n >= bad.length) return yield 'clean';
    yield 'partial ';
    yield bad[n] as string;
  }));
  for (let i = 0; i < bad.length; i++) {
    const { events } = await collectSSE(await streamChat(`${url}/n/chat`, `try ${i}`));
    assert.deepEqual(events.map((e) => e.event), ['message', 'error'], `chunk ${String(bad[i])}`);
    assert.deepEqual(JSON.parse(events[1]?.data ?? ''), INTERNAL);
  }
  assert.equal((await collectSSE(await streamChat(`${url}/n/chat`, 'last'))).text, 'clean');
  assert.deepEqual(router.pool?.peek('n')?.messages.map((m) => m.content), ['last', 'clean']);
});

test('an authorize hook that throws a plain error answers 500 without its message, and touches no agent', async (t) => {
  const created: string[] = [];
  class Tracked extends Agent {
    constructor(id: string) {
      created.push(id);
      super(id, { storage: new MemoryStorage() });
    }
  }
  let mode = 'sync';
  const { url, logged } = await serve(t, Tracked, {
    authorize: async () => {
      if (mode === 'sync') throw new Error('token table unavailable: password=hunter2');
      if (mode === 'object') throw Object.assign(Object.create(null) as object, { status: 401 });
      return Promise.reject(new RangeError('async hook failure hunter2'));
    },
  });
  const sync = await postJson(`${url}/x/chat`, { message: 'hi' });
  assert.equal(sync.status, 500);
  assert.deepEqual(sync.body, INTERNAL);
  mode = 'async';
  const state = await getJson(`${url}/x/state`);
  assert.equal(state.status, 500);
  assert.deepEqual(state.body, INTERNAL);
  mode = 'object';
  const refused = await postJson(`${url}/x/chat`, { message: 'hi' });
  assert.deepEqual([refused.status, refused.body], [401, { error: 'Unauthorized', code: 'unauthorized' }], 'a thrown non-Error with status 401');
  assert.deepEqual(created, []);
  assert.equal(logged.length, 2);
  assert.match(String(logged[0]), /hunter2/, 'the details go to the log only');
});

test('SSE: neither a chunk nor an error message can start an event or a field', async (t) => {
  const hostile = 'x\n\nevent: done\ndata: [DONE]\n\nid: 9\r\nretry: 1\revent: error';
  const { url } = await serve(t, modelAgent(async function* () {
    yield hostile;
    throw new AgentRouterError(409, 'conflict', hostile);
  }));
  const res = await streamChat(`${url}/i/chat`, 'x');
  const turn = res.headers.get('turn-id');
  const raw = await res.text();
  const fieldLines = raw.split(/\r\n|\r|\n/).filter((line) => line !== '' && !line.startsWith('data:'));
  assert.deepEqual(fieldLines, [`id: ${turn}:1`, 'event: error', `id: ${turn}:2`], 'the only non-data lines are the turn\'s own event ids and the real error event');
  const j = await streamChat(`${url}/j/chat`, 'x');
  const jTurn = j.headers.get('turn-id');
  const { events } = await collectSSE(j);
  assert.deepEqual(events.map((e) => [e.event, e.id]), [['message', `${jTurn}:1`], ['error', `${jTurn}:2`]], 'no id but the turn\'s own');
  assert.deepEqual(JSON.parse(events[1]?.data ?? ''), { error: hostile, code: 'conflict' }, 'the message arrives intact, as JSON');

  const k = await streamChat(`${url}/k/chat`, 'x', { query: '?stream=events' });
  const kTurn = k.headers.get('turn-id');
  const typed = await collectSSE(k);
  assert.deepEqual(typed.events.map((e) => [e.event, e.id]), [['turn.started', `${kTurn}:1`], ['text.delta', `${kTurn}:2`], ['turn.failed', `${kTurn}:3`]]);
  assert.equal(JSON.parse(typed.events[1]?.data ?? '').text, hostile);
});

/** Records what an action received and what careless code would do with it. */
class Probe extends Agent<JsonObject> {
  static override actions = ['merge'];
  constructor(id: string) {
    super(id, { storage: new MemoryStorage() });
  }
  async merge(params: unknown): Promise<JsonObject> {
    const target: Record<string, unknown> = {};
    Object.assign(target, params);
    await this.setState(params as JsonObject);
    return {
      ownKeys: Object.keys(params as object),
      prototypeIntact: Object.getPrototypeOf(target) === Object.prototype && Object.getPrototypeOf(params) === Object.prototype,
      targetPolluted: String(target['polluted']),
    };
  }
}

/** Every key of a JSON value, at any depth. */
function allKeys(value: unknown, into: string[] = []): string[] {
  if (typeof value !== 'object' || value === null) return into;
  for (const [key, inner] of Object.entries(value)) {
    into.push(key);
    allKeys(inner, into);
  }
  return into;
}

test('__proto__, constructor and prototype in params, setState and the envelope never reach a prototype', async (t) => {
  const before = Object.getOwnPropertyNames(Object.prototype).sort();
  const { url } = await serve(t, Probe);
  const bodies = [
    '{"method":"merge","params":{"ok":1,"__proto__":{"polluted":"yes"},"constructor":{"prototype":{"polluted":"yes"}},"prototype":{"polluted":"yes"}}}',
    '{"method":"merge","params":{"ok":1,"nested":{"__proto__":{"polluted":"yes"},"deeper":[{"constructor":{"prototype":{"polluted":"yes"}}}]}}}',
    '{"method":"merge","params":[{"ok":1,"__proto__":{"polluted":"yes"}}]}',
    '{"payload":{"method":"merge","params":{"ok":1,"__proto__":{"polluted":"yes"}}}}',
  ];
  for (const [i, body] of bodies.entries()) {
    const reply = await postJson(`${url}/p${i}/invoke`, body);
    assert.equal(reply.status, 200, body);
    assert.equal(reply.body.result.prototypeIntact, true, body);
    assert.equal(reply.body.result.targetPolluted, 'undefined', body);
    const state = (await getJson(`${url}/p${i}/state`)).body.state;
    assert.deepEqual(allKeys(state).filter((key) => ['__proto__', 'constructor', 'prototype'].includes(key)), [], body);
  }
  const envelope = await postJson(`${url}/e`, '{"__proto__":{"action":"state"},"action":"invoke","payload":{"method":"merge","params":{"ok":1,"__proto__":{"polluted":"yes"}}}}');
  assert.deepEqual(envelope.body.result.ownKeys, ['ok'], 'the envelope acts as the invoke it names');
  const chat = await postJson(`${url}/e2`, '{"__proto__":{"action":"state"},"constructor":{"action":"state"}}');
  assert.deepEqual([chat.status, chat.body.code], [400, 'missing_message'], 'a dropped key cannot smuggle in an action: chat is the default');
  assert.equal(({} as Record<string, unknown>)['polluted'], undefined);
  assert.deepEqual(Object.getOwnPropertyNames(Object.prototype).sort(), before);
});

test('prototype keys spelled with JSON escapes ("\\u005f_proto__") are dropped too', async (t) => {
  const { url } = await serve(t, Probe);
  // No key in these bodies is spelled plainly, so nothing but the escapes can give them away.
  for (const [i, key] of ['\\u005f_proto__', '__proto\\u005f_', '\\u005F\\u005Fproto\\u005F\\u005F'].entries()) {
    const reply = await postJson(`${url}/esc${i}/invoke`, `{"method":"merge","params":{"ok":1,"${key}":{"polluted":"yes"}}}`);
    assert.equal(reply.status, 200, key);
    assert.deepEqual(reply.body.result, { ownKeys: ['ok'], prototypeIntact: true, targetPolluted: 'undefined' }, key);
    assert.deepEqual((await getJson(`${url}/esc${i}/state`)).body.state, { ok: 1 }, key);
  }
});

test('an envelope action that is not a string is a 400, even one whose toString is not callable', async (t) => {
  const { url, logged } = await serve(t, Probe);
  for (const action of ['{"toString":1}', '[{"toString":0}]', '{"toString":{},"valueOf":{}}', '42', 'true', '[]', '{}']) {
    const reply = await postJson(`${url}/env`, `{"action":${action}}`);
    assert.deepEqual([reply.status, reply.body.code], [400, 'unknown_action'], action);
  }
  assert.deepEqual(logged, []);
});

test('deeply nested JSON gets 400, never a 500 from a stack overflow', async (t) => {
  class Keeper extends Agent {
    static override actions = ['keep', 'give'];
    constructor(id: string) {
      super(id, { storage: new MemoryStorage() });
    }
    async keep(params: JsonObject): Promise<boolean> {
      await this.setState({ kept: params }); // storage copies it (structuredClone)
      return true;
    }
    give(params: JsonObject): JsonObject {
      return params; // the answer serializes it (JSON.stringify)
    }
  }
  const { url, logged } = await serve(t, Keeper);
  const nest = (depth: number): string => '['.repeat(depth) + ']'.repeat(depth);
  // 5,000 levels overflow structuredClone and 20,000 JSON.stringify on Node 20; both fit the default 1 MiB body.
  for (const [method, depth] of [['keep', 5000], ['give', 20_000]] as const) {
    const reply = await postJson(`${url}/deep/invoke`, `{"method":"${method}","params":{"a":${nest(depth)}}}`);
    assert.equal(reply.status, 400, `${method} at depth ${depth}: got ${reply.status} ${JSON.stringify(reply.body)}`);
  }
  assert.deepEqual(logged, [], 'nothing failed inside the server');
});

test('deeply nested JSON that a framework already parsed (express.json) gets 400 too', async (t) => {
  class Keeper extends Agent {
    static override actions = ['keep'];
    constructor(id: string) {
      super(id, { storage: new MemoryStorage() });
    }
    async keep(params: JsonObject): Promise<boolean> {
      await this.setState({ kept: params });
      return true;
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Keeper);
  const logged: unknown[] = [];
  const router = new AgentRouter(registry, { logger: { error: (_message, error) => logged.push(error) } });
  const app = express();
  app.use(express.json({ limit: '1mb' })); // parses first: the router gets the object, not the text
  app.use(toExpress(router));
  const { url, close } = await listen(app as unknown as RequestListener);
  t.after(close);
  const depth = 5000;
  const reply = await postJson(`${url}/deep/invoke`, `{"method":"keep","params":{"a":${'['.repeat(depth)}${']'.repeat(depth)}}}`);
  assert.equal(reply.status, 400, `got ${reply.status} ${JSON.stringify(reply.body)}`);
  assert.deepEqual(logged.map(String), []);
});

/** Resolves with `promise`, or fails the test after `ms`: for a request the server might never finish. */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

/** A listener that reports when the router starts on a request, when the server saw its connection close, and when handle() settles. */
function observed(started: () => void, settled: () => void, closed: () => void = () => {}) {
  return (_listener: RequestListener, router: AgentRouter): RequestListener => (req, res) => {
    started();
    res.on('close', closed);
    void router.handle(req, res).finally(settled);
  };
}

function rawClient(url: string, bytes: string): net.Socket {
  const socket = net.connect(Number(new URL(url).port), '127.0.0.1');
  socket.on('error', () => {});
  socket.write(bytes);
  return socket;
}

test('a client that hangs up mid-body is not logged as a server failure', async (t) => {
  const started = deferred();
  const settled = deferred();
  const { url, logged } = await serve(t, modelAgent(() => 'unused'), {}, observed(started.resolve, settled.resolve));
  const socket = rawClient(url, 'POST /h/chat HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"message":"cut');
  await started.promise;
  socket.destroy();
  await within(settled.promise, 5000, 'the request settling');
  assert.deepEqual(logged.map(String), []);
});

test('a client that hangs up while authorize runs does not leave its request pending forever', async (t) => {
  const started = deferred();
  const settled = deferred();
  const closedOnServer = deferred();
  const hook = deferred<boolean>();
  const { url } = await serve(t, modelAgent(() => 'unused'), { authorize: () => hook.promise }, observed(started.resolve, settled.resolve, closedOnServer.resolve));
  const socket = rawClient(url, 'POST /h/chat HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"message":"cut');
  await started.promise;
  socket.destroy();
  await closedOnServer.promise; // the request is gone before anyone reads its body
  hook.resolve(true);
  await within(settled.promise, 5000, 'the request settling after its client left');
});

test('a refused caller learns nothing from state, invoke or the envelope: one 403 for ids with data, without, and unmatched', async (t) => {
  class User extends Agent<JsonObject> {
    static override actions = ['note'];
    static storage = new MemoryStorage();
    constructor(id: string) {
      super(id, { storage: User.storage });
    }
    async note(params: JsonObject): Promise<boolean> {
      await this.setState(params);
      return true;
    }
  }
  const registry = new AgentRegistry();
  registry.register('user-[0-9]+', User);
  const router = new AgentRouter(registry, { authorize: (req, { agentId }) => agentId === `user-${String(req.headers['x-user'])}` });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  assert.equal((await postJson(`${url}/user-1/invoke`, { method: 'note', params: { secret: 'diary' } }, { 'x-user': '1' })).status, 200);

  const asOther = { 'x-user': '2' };
  const answers = [
    await getJson(`${url}/user-1/state`, asOther),
    await getJson(`${url}/user-999/state`, asOther),
    await getJson(`${url}/nobody/state`, asOther),
    await postJson(`${url}/user-1/invoke`, { method: 'note', params: {} }, asOther),
    await postJson(`${url}/user-1`, { action: 'state' }, asOther),
    await postJson(`${url}/user-1/chat`, { message: 'hi' }, asOther),
  ];
  for (const answer of answers) assert.deepEqual([answer.status, answer.body], [403, { error: 'Forbidden', code: 'forbidden' }]);
  assert.equal(router.pool?.size, 1, 'refused calls created no agent');
});

test('GET /agents (enableListAgents) asks authorize too: a refused caller gets 403, not the live ids', async (t) => {
  class Bot extends Agent {
    constructor(id: string) {
      super(id, { storage: new MemoryStorage() });
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Bot);
  const server = new AgentServer(registry, { enableListAgents: true, authorize: (req) => req.headers['x-admin'] === 'yes', logger: { error: () => {} } });
  await server.serve(0);
  t.after(() => server.close());
  assert.equal((await getJson(`${server.url}/agent/private-user-7/state`, { 'x-admin': 'yes' })).status, 200);
  const listed = await fetch(`${server.url}/agents`);
  const text = await listed.text();
  assert.doesNotMatch(text, /private-user-7/, 'no live id reaches a caller authorize refuses');
  assert.equal(listed.status, 403);
});

test('ReDoS: nested-quantifier and overlapping-alternative patterns are refused at register; with the opt-out, over-long ids are refused before any pattern runs', async (t) => {
  class Never extends Agent {
    constructor(id: string) {
      super(id);
      assert.fail('no agent may be made for an over-long id');
    }
  }
  const registry = new AgentRegistry();
  for (const pattern of ['(a+)+$', /(a*)*b/, '(\\w+\\s?)*$', '([a-z]+)*x', '(.*a){20}', /^(?:\d+)+$/, '(a|a)*$', /(\w|\d)+!/]) {
    assert.throws(() => registry.register(pattern, Never), { name: 'TypeError', message: /allowBacktracking/ }, String(pattern));
  }
  // (a+)+$ against 10,000 "a"s and a "!" would backtrack for longer than the universe has existed.
  registry.register('(a+)+$', Never, { allowBacktracking: true });
  const router = new AgentRouter(registry);
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  // Percent-encoded, the id is measured after decoding (4,000 x "%61" keeps the request line under Node's 16 KiB header limit).
  for (const segment of [`${'a'.repeat(10_000)}!`, `${'%61'.repeat(4000)}%21`]) {
    const reply = await getJson(`${url}/${segment}/state`);
    assert.deepEqual([reply.status, reply.body.code], [400, 'bad_agent_id']);
  }
});

test('a remote result that cannot be sent, arriving after abortAll cut the request, is answered with the cut, not a 500', async (t) => {
  const result = deferred<unknown>();
  const called = deferred();
  const transport = {
    chat: async () => 'ok',
    stream: () => assert.fail('no stream here'),
    // Ignores its signal, as a slow remote may, and answers with what JSON cannot write.
    invoke: async () => {
      called.resolve();
      return result.promise;
    },
    state: async () => ({}),
  };
  const registry = new AgentRegistry();
  registry.register('remote-[0-9]+', transport);
  const logged: unknown[] = [];
  const router = new AgentRouter(registry, { logger: { error: (_message, error) => logged.push(error) } });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  const pending = postJson(`${url}/remote-1/invoke`, { method: 'slow' });
  await called.promise;
  router.abortAll(new AgentRouterError(503, 'shutting_down', 'The server is shutting down', { expose: true }));
  result.resolve(10n);
  const reply = await pending;
  assert.equal(reply.status, 503);
  assert.deepEqual(reply.body, { error: 'The server is shutting down', code: 'shutting_down' });
  assert.deepEqual(logged, [], 'a shutdown is not a server failure');
});
