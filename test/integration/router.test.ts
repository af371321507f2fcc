import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import http from 'node:http';
import { test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouterError } from '../../src/errors.ts';
import { AgentRouter, serveRequest } from '../../src/router/router.ts';
import { echoModel } from '../../src/models/echo.ts';
import { scriptedModel } from '../../src/models/scripted.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { deferred, getJson, postJson, postTransferCoded } from '../helpers/http.ts';
import { listen } from '../helpers/listen.ts';
import { noTurnId } from '../helpers/turns.ts';
import { withoutIds } from '../helpers/sse.ts';

class Counter extends Agent<{ count: number; log: string[] }> {
  static override actions = ['increment', 'add', 'reset', 'explode'];
  constructor(id: string) {
    super(id, { model: echoModel(), storage: new MemoryStorage(), initialState: { count: 0, log: [] } });
  }
  async increment({ by = 1 }: { by?: number } = {}): Promise<number> {
    await this.setState({ count: this.state.count + by });
    return this.state.count;
  }
  async add(a: number, b: number): Promise<number> {
    return a + b;
  }
  async reset(): Promise<null> {
    await this.setState({ count: 0 });
    return null;
  }
  async explode(): Promise<never> {
    await this.setState({ count: -999 });
    throw new Error('secret database password in this message');
  }
  notAnAction(): string {
    return 'should never be reachable';
  }
}

/** What a host app behind handle() answers for a path the router left it. */
function sendHost(res: http.ServerResponse, text: string): void {
  res.writeHead(200, { 'content-type': 'text/plain' }).end(text);
}

function registryRouter(options: ConstructorParameters<typeof AgentRouter>[1] = {}) {
  const registry = new AgentRegistry();
  registry.register('counter-[0-9]+', Counter);
  return new AgentRouter(registry, { logger: { error: () => {} }, ...options });
}

test('single agent: chat, invoke, state and the generic envelope', async (t) => {
  const agent = new Counter('solo');
  const { url, close } = await listen(new AgentRouter(agent).toRequestListener());
  t.after(close);

  assert.deepEqual(noTurnId((await postJson(`${url}/chat`, { message: 'hello there' })).body), { agent_id: 'solo', response: 'hello there' });
  assert.deepEqual(noTurnId((await postJson(`${url}/invoke`, { method: 'increment', params: { by: 2 } })).body), { agent_id: 'solo', result: 2 });
  assert.deepEqual((await getJson(`${url}/state`)).body, { agent_id: 'solo', state: { count: 2, log: [] } });
  assert.deepEqual(noTurnId((await postJson(`${url}/`, { message: 'default is chat' })).body), { agent_id: 'solo', response: 'default is chat' });
  assert.deepEqual(noTurnId((await postJson(`${url}/`, { action: 'invoke', payload: { method: 'increment' } })).body), { agent_id: 'solo', result: 3 });
  assert.deepEqual((await postJson(`${url}/`, { action: 'state' })).body, { agent_id: 'solo', state: { count: 3, log: [] } });
  assert.deepEqual(agent.messages.map((m) => m.content), ['hello there', 'hello there', 'default is chat', 'default is chat']);
});

test('single agent under a prefix; other paths are not the router\'s', async (t) => {
  const router = new AgentRouter(new Counter('solo'), { prefix: '/bot/' });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  assert.equal((await postJson(`${url}/bot/chat`, { message: 'hi' })).body.response, 'hi');
  assert.equal((await postJson(`${url}/bot`, { action: 'state' })).status, 200);
  // A trailing slash is tolerated, as on a registry router.
  assert.equal((await postJson(`${url}/bot/chat/`, { message: 'hi' })).body.response, 'hi');
  assert.equal((await postJson(`${url}/bot/invoke/`, { method: 'increment' })).body.result, 1);
  assert.deepEqual((await getJson(`${url}/bot/state/`)).body.state, { count: 1, log: [] });
  const miss = await postJson(`${url}/botx/chat`, { message: 'hi' });
  assert.equal(miss.status, 404);
  assert.equal(miss.body.code, 'not_found');
});

test('registry: one live instance per id keeps state and history across requests', async (t) => {
  const router = registryRouter({ prefix: '/agents' });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  const base = `${url}/agents/counter-1`;
  assert.deepEqual(noTurnId((await postJson(`${base}/invoke`, { method: 'increment', params: { by: 5 } })).body), { agent_id: 'counter-1', result: 5 });
  assert.deepEqual((await postJson(`${base}/invoke`, { payload: { method: 'increment', params: { by: 5 } } })).body.result, 10);
  assert.deepEqual((await postJson(`${base}/invoke`, { method: 'add', params: [2, 3] })).body.result, 5);
  // Spread as arguments, half a million overflowed the stack (a 500); past 256 it is the caller's mistake.
  assert.equal((await postJson(`${base}/invoke`, { method: 'add', params: Array(256).fill(1) })).status, 200);
  const tooMany = await postJson(`${base}/invoke`, { method: 'add', params: Array(500_000).fill(1) });
  assert.deepEqual([tooMany.status, tooMany.body.code], [400, 'too_many_params']);
  assert.match(tooMany.body.error, /"params" holds 500000 positional arguments, more than 256; pass a list as one argument/);
  assert.deepEqual(noTurnId((await postJson(`${base}/invoke`, { method: 'reset' })).body), { agent_id: 'counter-1', result: null });
  assert.deepEqual((await postJson(`${base}/invoke`, { method: 'increment' })).body.result, 1);
  assert.deepEqual((await getJson(`${base}/state`)).body, { agent_id: 'counter-1', state: { count: 1, log: [] } });
  assert.deepEqual((await getJson(`${url}/agents/counter-2/state`)).body.state, { count: 0, log: [] });
  assert.equal((await postJson(`${base}/chat`, { message: 'one' })).body.response, 'one');
  assert.equal((await postJson(base, { action: 'chat', message: 'two' })).body.response, 'two');
  assert.equal(router.pool?.peek('counter-1')?.messages.length, 4);
});

test('strictContentType: false takes a body with no Content-Type as JSON; a declared non-JSON type is still 415', async (t) => {
  const untyped = (url: string): Promise<Response> => fetch(url, { method: 'POST', body: new Blob([JSON.stringify({ method: 'increment' })]) });
  const strict = await listen(registryRouter().toRequestListener());
  t.after(strict.close);
  const refused = await untyped(`${strict.url}/counter-1/invoke`);
  assert.equal(refused.status, 415);
  assert.deepEqual(await refused.json(), {
    error: 'The request body has no Content-Type; send JSON with Content-Type: application/json',
    code: 'unsupported_media_type',
  });

  const lax = await listen(registryRouter({ strictContentType: false }).toRequestListener());
  t.after(lax.close);
  assert.deepEqual(noTurnId(await (await untyped(`${lax.url}/counter-1/invoke`)).json()), { agent_id: 'counter-1', result: 1 });
  assert.equal((await postJson(`${lax.url}/counter-1/chat`, 'message=hi', { 'content-type': 'text/plain' })).status, 415);
  assert.throws(() => registryRouter({ strictContentType: 'no' as never }), /strictContentType/);
});

test('error rows of DESIGN.md answer JSON {error, code} with their status', async (t) => {
  const logged: unknown[] = [];
  const router = registryRouter({ bodyLimit: 1024, logger: { error: (_m, e) => logged.push(e) } });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  const cases: Array<[string, Promise<{ status: number; body: any; headers: Headers }>, number, string]> = [
    ['invalid JSON', postJson(`${url}/counter-1/chat`, '{"message": '), 400, 'invalid_json'],
    ['missing message', postJson(`${url}/counter-1/chat`, {}), 400, 'missing_message'],
    ['non-string message', postJson(`${url}/counter-1/chat`, { message: 42 }), 400, 'missing_message'],
    ['body not an object', postJson(`${url}/counter-1/chat`, '[1,2]'), 400, 'invalid_body'],
    ['unknown generic action', postJson(`${url}/counter-1`, { action: 'delete' }), 400, 'unknown_action'],
    ['invoke without method', postJson(`${url}/counter-1/invoke`, { params: {} }), 400, 'missing_method'],
    ['unknown id', postJson(`${url}/nobody/chat`, { message: 'x' }), 404, 'agent_not_found'],
    ['unknown path', postJson(`${url}/counter-1/delete`, {}), 404, 'not_found'],
    ['unknown method', postJson(`${url}/counter-1/invoke`, { method: 'nope' }), 404, 'unknown_method'],
    ['unlisted method', postJson(`${url}/counter-1/invoke`, { method: 'notAnAction' }), 404, 'unknown_method'],
    ['constructor', postJson(`${url}/counter-1/invoke`, { method: 'constructor' }), 404, 'unknown_method'],
    ['setState', postJson(`${url}/counter-1/invoke`, { method: 'setState', params: { count: 1e9 } }), 404, 'unknown_method'],
    ['chat via invoke', postJson(`${url}/counter-1/invoke`, { method: 'chat', params: ['x'] }), 404, 'unknown_method'],
    ['__proto__', postJson(`${url}/counter-1/invoke`, { method: '__proto__' }), 404, 'unknown_method'],
    ['wrong content type', postJson(`${url}/counter-1/chat`, 'message=hi', { 'content-type': 'text/plain' }), 415, 'unsupported_media_type'],
    ['body over the limit', postJson(`${url}/counter-1/chat`, { message: 'x'.repeat(2000) }), 413, 'body_too_large'],
    ['action throws', postJson(`${url}/counter-1/invoke`, { method: 'explode' }), 500, 'internal_error'],
    ['bad stream flag', postJson(`${url}/counter-1/chat?stream=maybe`, { message: 'x' }), 400, 'bad_query'],
  ];
  for (const [name, reply, status, code] of cases) {
    const { status: got, body, headers } = await reply;
    assert.equal(got, status, name);
    assert.equal(body.code, code, name);
    assert.equal(typeof body.error, 'string', name);
    assert.match(headers.get('content-type') ?? '', /^application\/json/, name);
  }
  const failed = await postJson(`${url}/counter-1/invoke`, { method: 'explode' });
  assert.deepEqual(failed.body, { error: 'Internal error', code: 'internal_error' });
  // A near miss of `events` is told every accepted value, `events` included.
  const typo = await postJson(`${url}/counter-1/chat?stream=event`, { message: 'x' });
  assert.equal(typo.body.error, 'Query parameter stream must be true or false (or 1/0, yes/no, on/off), or events for typed events, or ui for the AI SDK UI message stream');
  assert.equal(logged.length, 2, 'each 500 is logged with its details');
  assert.match(String(logged[0]), /secret database password/);
  assert.deepEqual((await getJson(`${url}/counter-1/state`)).body.state, { count: 0, log: [] }, 'a failed action changes nothing');
});

test("an action's own 499 is answered, even with the code the router uses for a client that is gone", async (t) => {
  class Picky extends Agent {
    static override actions = ['refuse'];
    async refuse(): Promise<never> {
      throw new AgentRouterError(499, 'client_closed', 'Refused by the action', { expose: true });
    }
  }
  const { url, close } = await listen(new AgentRouter(new Picky('picky', { storage: new MemoryStorage() })).toRequestListener());
  t.after(close);
  // Unanswered before: the timeout is the test's failure, not a wait.
  const reply = await fetch(`${url}/invoke`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"method":"refuse"}', signal: AbortSignal.timeout(5000) });
  assert.deepEqual([reply.status, await reply.json()], [499, { error: 'Refused by the action', code: 'client_closed' }]);
});

test('405 carries Allow', async (t) => {
  const { url, close } = await listen(registryRouter().toRequestListener());
  t.after(close);
  const get = await fetch(`${url}/counter-1/chat`);
  assert.equal(get.status, 405);
  assert.equal(get.headers.get('allow'), 'POST');
  assert.equal((await get.json()).code, 'method_not_allowed');
  const post = await fetch(`${url}/counter-1/state`, { method: 'POST' });
  assert.equal(post.status, 405);
  assert.equal(post.headers.get('allow'), 'GET, HEAD');
  await post.body?.cancel();
  // On a server of its own the router owns every path of its routes' shapes: a GET on the generic route's is 405 too.
  const generic = await fetch(`${url}/counter-1`);
  assert.equal(generic.status, 405);
  assert.equal(generic.headers.get('allow'), 'POST');
  await generic.body?.cancel();
});

test('HEAD is answered as GET without the body (state, openapi.json)', async (t) => {
  const { url, close } = await listen(registryRouter({ openapi: true }).toRequestListener());
  t.after(close);
  const get = await fetch(`${url}/counter-1/state`);
  const head = await fetch(`${url}/counter-1/state`, { method: 'HEAD' });
  assert.equal(head.status, 200);
  assert.equal(head.headers.get('content-length'), get.headers.get('content-length'));
  assert.equal(await head.text(), '');
  assert.equal((await fetch(`${url}/openapi.json`, { method: 'HEAD' })).status, 200);
});

test('handle() leaves a host app the non-POST methods of a path one segment deep (its /health, /favicon.ico)', async (t) => {
  const router = registryRouter();
  const { url, close } = await listen((req, res) => {
    void router.handle(req, res).then((handled) => {
      if (!handled) sendHost(res, `host: ${req.method} ${req.url}`);
    });
  });
  t.after(close);
  assert.equal(await (await fetch(`${url}/health`)).text(), 'host: GET /health');
  assert.equal(await (await fetch(`${url}/favicon.ico`, { method: 'DELETE' })).text(), 'host: DELETE /favicon.ico');
  assert.equal(router.matches('GET', '/health'), false);
  assert.equal(router.matches('POST', '/health'), true);
  // A POST there is the generic route's, and the other routes keep their 405.
  assert.equal((await postJson(`${url}/nobody`, { message: 'x' })).status, 404);
  const chat = await fetch(`${url}/counter-1/chat`);
  assert.equal(chat.status, 405);
  await chat.body?.cancel();
});

test('bad agent ids are refused with 400 before any lookup', async (t) => {
  const seen: string[] = [];
  const registry = new AgentRegistry();
  class Spy extends Agent {
    constructor(id: string) {
      seen.push(id);
      super(id, { model: echoModel() });
    }
  }
  registry.register('.*', Spy);
  const { url, close } = await listen(new AgentRouter(registry, { maxIdLength: 20 }).toRequestListener());
  t.after(close);
  for (const segment of ['%2e%2e', '%2E', '..', 'a%2Fb', 'a%00b', 'tab%09', '%E0%A4%A', 'x'.repeat(21), '%7F']) {
    const reply = await raw(url, 'GET', `/${segment}/state`);
    assert.equal(reply.status, 400, segment);
    assert.equal(JSON.parse(reply.body).code, 'bad_agent_id', segment);
  }
  assert.equal((await raw(url, 'GET', '//state')).status, 400, 'empty id');
  assert.deepEqual(seen, []);
  const ok = await getJson(`${url}/caf%C3%A9%20au%20lait/state`);
  assert.equal(ok.body.agent_id, 'café au lait', 'decoded exactly once');
  assert.equal((await getJson(`${url}/100%2525/state`)).body.agent_id, '100%25');
});

test('413 from content-length before reading and while reading a chunked body', async (t) => {
  const { url, close } = await listen(registryRouter({ bodyLimit: 100 }).toRequestListener());
  t.after(close);
  const declared = await raw(url, 'POST', '/counter-1/chat', 'x'.repeat(101), { 'content-type': 'application/json' });
  assert.equal(declared.status, 413);
  const chunked = await new Promise<number>((resolve, reject) => {
    const req = http.request(`${url}/counter-1/chat`, { method: 'POST', headers: { 'content-type': 'application/json' } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.write('{"message": "');
    req.write('y'.repeat(200));
    req.end('"}');
  });
  assert.equal(chunked, 413);
});

test('keys that could reach a prototype are dropped from wire JSON', async (t) => {
  let received: unknown;
  class Probe extends Agent {
    static override actions = ['take'];
    take(params: Record<string, unknown>): string {
      received = params;
      const target: Record<string, unknown> = {};
      Object.assign(target, params);
      return String(({} as Record<string, unknown>)['polluted']);
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Probe);
  const { url, close } = await listen(new AgentRouter(registry).toRequestListener());
  t.after(close);
  const reply = await postJson(`${url}/p/invoke`, '{"method":"take","params":{"a":1,"__proto__":{"polluted":"yes"},"constructor":{"prototype":{"polluted":"yes"}}}}');
  assert.equal(reply.body.result, 'undefined');
  assert.deepEqual(received, { a: 1 });
});

test('handle() resolves false for foreign paths so a host app can fall through', async (t) => {
  const router = registryRouter({ prefix: '/agents' });
  const { url, close } = await listen((req, res) => {
    router.handle(req, res).then((handled) => {
      if (!handled) res.end('host app');
    });
  });
  t.after(close);
  assert.equal(await (await fetch(`${url}/health`)).text(), 'host app');
  assert.equal(await (await fetch(`${url}/agents`)).text(), 'host app');
  assert.equal(await (await fetch(`${url}/agents/counter-1/unknown`)).text(), 'host app');
  assert.equal((await getJson(`${url}/agents/counter-1/state`)).status, 200);
});

test('GET state does not wait behind a running turn and shows only committed state', async (t) => {
  const release = deferred();
  const started = deferred();
  class Slow extends Agent<{ n: number }> {
    static override actions = ['bump'];
    constructor(id: string) {
      super(id, { model: echoModel(), initialState: { n: 0 } });
    }
    async bump(): Promise<number> {
      await this.setState({ n: 1 });
      started.resolve();
      await release.promise;
      return this.state.n;
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Slow);
  const { url, close } = await listen(new AgentRouter(registry).toRequestListener());
  t.after(close);
  const bump = postJson(`${url}/s/invoke`, { method: 'bump' });
  await started.promise;
  assert.deepEqual((await getJson(`${url}/s/state`)).body.state, { n: 0 });
  release.resolve();
  assert.equal((await bump).body.result, 1);
  assert.deepEqual((await getJson(`${url}/s/state`)).body.state, { n: 1 });
});

test('20 concurrent chats on one id run one at a time, each seeing a consistent history', async (t) => {
  class Recorder extends Agent {
    constructor(id: string) {
      super(id, {
        model: scriptedModel(async function* ({ messages }) {
          const last = messages[messages.length - 1]?.content ?? '';
          yield `saw ${messages.length - 1} before `;
          await new Promise((resolve) => setImmediate(resolve));
          yield last;
        }),
      });
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Recorder);
  const router = new AgentRouter(registry);
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  const replies = await Promise.all(
    Array.from({ length: 20 }, (_, i) => postJson(`${url}/shared/chat`, { message: `m${i}` })),
  );
  const seen = replies.map((r) => Number(/saw (\d+)/.exec(r.body.response)?.[1])).sort((a, b) => a - b);
  assert.deepEqual(seen, Array.from({ length: 20 }, (_, i) => i * 2));
  const history = router.pool?.peek('shared')?.messages ?? [];
  assert.equal(history.length, 40);
  for (let i = 0; i < 40; i += 2) {
    assert.equal(history[i]?.role, 'user');
    assert.equal(history[i + 1]?.role, 'assistant');
    assert.equal(history[i + 1]?.content, `saw ${i} before ${history[i]?.content}`);
  }
});

test('a turn over turnTimeout is aborted with 504 and changes nothing', async (t) => {
  class Hang extends Agent {
    constructor(id: string) {
      super(id, {
        model: scriptedModel(({ signal }) => new Promise<string>((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)))),
      });
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Hang);
  const router = new AgentRouter(registry, { turnTimeout: 0.05, logger: { error: () => {} } });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  const reply = await postJson(`${url}/h/chat`, { message: 'hi' });
  assert.equal(reply.status, 504);
  assert.equal(reply.body.code, 'turn_timeout');
  assert.equal(router.pool?.peek('h')?.messages.length, 0);
});

test("one hint.signal shared by every handle() call (a host's shutdown signal) gets one listener however many turns run, and cuts them all", async (t) => {
  const held = 30; // past the 10 listeners Node warns at
  let running = 0;
  const allRunning = deferred();
  class Hang extends Agent {
    constructor(id: string) {
      super(id, {
        model: scriptedModel(({ signal }) => {
          if (++running === held) allRunning.resolve();
          return new Promise<string>((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)));
        }),
      });
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Hang);
  const router = new AgentRouter(registry, { logger: { error: () => {} } });
  const shutdown = new AbortController();
  const { url, close } = await listen((req, res) => void router.handle(req, res, { signal: shutdown.signal }));
  t.after(close);
  const warnings: Error[] = [];
  const onWarning = (warning: Error): void => void warnings.push(warning);
  process.on('warning', onWarning);
  t.after(() => process.off('warning', onWarning));

  const replies = Array.from({ length: held }, (_, i) => postJson(`${url}/shared-${i}/chat`, { message: 'hi' }));
  await allRunning.promise;
  assert.equal(getEventListeners(shutdown.signal, 'abort').length, 1);
  shutdown.abort(new AgentRouterError(503, 'shutting_down', 'The server is shutting down', { expose: true }));
  for (const reply of await Promise.all(replies)) assert.deepEqual([reply.status, reply.body.code], [503, 'shutting_down']);
  // Node emits its warning a tick after the listener that crosses the line.
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(warnings.filter((warning) => warning.name === 'MaxListenersExceededWarning'), []);
});

test('one signal passed to many agents\' chat() gets one listener however many turns wait on it', async () => {
  const signal = new AbortController().signal;
  const gate = deferred();
  const agents = Array.from({ length: 30 }, (_, i) => new Agent(`signal-shared-${i}`, { model: scriptedModel(() => gate.promise.then(() => 'done')), storage: new MemoryStorage() }));
  const turns = agents.map((agent) => agent.chat('hi', { signal }));
  await new Promise((resolve) => setImmediate(resolve));
  assert.ok(getEventListeners(signal, 'abort').length <= 1, `${getEventListeners(signal, 'abort').length} listeners on the caller's signal`);
  gate.resolve();
  assert.deepEqual(await Promise.all(turns), Array(30).fill('done'));
  assert.equal(getEventListeners(signal, 'abort').length, 0, 'none once no turn follows it');
});

test("handle()'s hint.signal cuts a running turn (JSON and stream) with its reason, and a signal aborted before refuses at once", async (t) => {
  let started = deferred();
  class Hang extends Agent {
    constructor(id: string) {
      super(id, {
        model: scriptedModel(({ signal }) => {
          started.resolve();
          return new Promise<string>((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)));
        }),
      });
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Hang);
  const router = new AgentRouter(registry, { logger: { error: () => {} } });
  let controller = new AbortController();
  const { url, close } = await listen((req, res) => void router.handle(req, res, { signal: controller.signal }));
  t.after(close);
  const shutdown = new AgentRouterError(503, 'shutting_down', 'The server is shutting down', { expose: true });

  const json = postJson(`${url}/h/chat`, { message: 'hi' });
  await started.promise;
  controller.abort(shutdown);
  const reply = await json;
  assert.equal(reply.status, 503);
  assert.equal(reply.body.code, 'shutting_down');
  assert.equal(router.pool?.peek('h')?.messages.length, 0, 'the cut turn changed nothing');

  controller = new AbortController();
  started = deferred();
  const stream = fetch(`${url}/s/chat?stream=true`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ message: 'hi' }) });
  await started.promise;
  controller.abort(shutdown);
  const text = await (await stream).text();
  assert.match(withoutIds(text), /event: error\ndata: \{"error":"The server is shutting down","code":"shutting_down"\}/);
  assert.equal(router.openStreams, 0);

  controller = new AbortController();
  controller.abort(shutdown);
  const refused = await postJson(`${url}/r/chat`, { message: 'hi' });
  assert.equal(refused.status, 503);
  assert.equal(router.pool?.peek('r')?.messages.length ?? 0, 0);
});

test('authorize: false is 403, a thrown 401 is 401, and the agent is never touched', async (t) => {
  const created: string[] = [];
  const registry = new AgentRegistry();
  class Tracked extends Agent {
    constructor(id: string) {
      created.push(id);
      super(id, { model: echoModel() });
    }
  }
  registry.register('.*', Tracked);
  const router = new AgentRouter(registry, {
    authorize: (req, { agentId, action }) => {
      const user = req.headers['x-user'];
      if (user === undefined) throw Object.assign(new Error('Log in first'), { status: 401 });
      return agentId === `user-${user}` && action !== 'invoke';
    },
  });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  const anonymous = await postJson(`${url}/user-1/chat`, { message: 'x' });
  assert.equal(anonymous.status, 401);
  assert.deepEqual(anonymous.body, { error: 'Log in first', code: 'unauthorized' });
  const other = await postJson(`${url}/user-2/chat`, { message: 'x' }, { 'x-user': '1' });
  assert.equal(other.status, 403);
  assert.equal(other.body.code, 'forbidden');
  const viaEnvelope = await postJson(`${url}/user-1`, { action: 'invoke', payload: { method: 'x' } }, { 'x-user': '1' });
  assert.equal(viaEnvelope.status, 403, 'the envelope is authorized as the action it carries');
  assert.deepEqual(created, []);
  assert.equal((await postJson(`${url}/user-1/chat`, { message: 'mine' }, { 'x-user': '1' })).body.response, 'mine');
});

test('lastMessages: the model is sent the latest messages from a user message on; the whole history is still kept', async (t) => {
  const sent: string[][] = [];
  const storage = new MemoryStorage();
  const agent = new Agent('windowed', {
    storage,
    lastMessages: 4,
    model: scriptedModel(({ messages }) => {
      sent.push(messages.map((message) => `${message.role[0]}:${message.content}`));
      return `re ${messages[messages.length - 1]?.content}`;
    }),
  });
  const { url, close } = await listen(new AgentRouter(agent).toRequestListener());
  t.after(close);
  for (const message of ['one', 'two', 'three', 'four']) assert.equal((await postJson(`${url}/chat`, { message })).status, 200);
  assert.deepEqual(sent, [
    ['u:one'],
    ['u:one', 'a:re one', 'u:two'],
    // The last four would open with a reply, which providers refuse: the window starts at the next user message.
    ['u:two', 'a:re two', 'u:three'],
    ['u:three', 'a:re three', 'u:four'],
  ]);
  assert.equal((await storage.load('windowed'))?.messages.length, 8, 'storage keeps every message');
  assert.throws(() => new Agent('x', { lastMessages: 0 }), /lastMessages must be a whole number >= 1/);
});

test('authorize fails closed: only true lets a request through; undefined, null, 0, "" or an object is a 500 naming the mistake in the log', async (t) => {
  const verdicts: unknown[] = [undefined, null, 0, '', Number.NaN, 'yes', { id: 1 }];
  const logged: string[] = [];
  let verdict: unknown;
  const router = new AgentRouter(new Agent('bot', { model: echoModel(), storage: new MemoryStorage() }), {
    // What a hook such as `(req) => req.user?.isAdmin` or `(req) => req.headers.authorization && check(...)` returns.
    authorize: () => verdict as boolean,
    logger: { error: (_message, error) => logged.push(String((error as Error).message)) },
  });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  for (const [i, value] of verdicts.entries()) {
    verdict = value;
    const reply = await postJson(`${url}/chat`, { message: 'hello' });
    assert.deepEqual([reply.status, reply.body], [500, { error: 'Internal error', code: 'internal_error' }], String(value));
    assert.match(logged[i] ?? '', /^authorize must return \(or resolve\) true to allow or false to refuse, got /);
  }
  assert.match(logged[0] ?? '', /got undefined; e\.g\. return req\.user\?\.isAdmin === true$/);
  assert.equal((await getJson(`${url}/state`)).status, 500);
  verdict = true;
  assert.equal((await postJson(`${url}/chat`, { message: 'hello' })).status, 200);
  verdict = false;
  assert.equal((await postJson(`${url}/chat`, { message: 'hello' })).status, 403);
  verdict = true;
  assert.equal((await postJson(`${url}/chat`, { message: 'again' })).body.response, 'again');
  assert.equal(logged.length, verdicts.length + 1);
});

/** A request with a raw path (fetch would normalize dot segments) and a text reply. */
function raw(url: string, method: string, path: string, body?: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const { hostname, port } = new URL(url);
    const req = http.request({ hostname, port, path, method, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

test('a transfer coding other than chunked is 501 before the body is read (Node hands on the coded bytes), and not logged as a fault', async (t) => {
  const logged: unknown[] = [];
  const { url, close } = await listen(registryRouter({ logger: { error: (message: string) => logged.push(message) } }).toRequestListener());
  t.after(close);
  const gzipped = await postTransferCoded(`${url}/counter-1/chat`, gzipSync('{"message":"hi"}'), 'gzip, chunked');
  assert.equal(gzipped.status, 501);
  assert.deepEqual(await gzipped.json(), {
    error: 'Transfer-Encoding "gzip, chunked" is not supported; send the body with chunked alone, or with a Content-Length',
    code: 'unsupported_transfer_encoding',
  });
  // A coding the bytes happen to survive still never reaches the agent: the router cannot know what it did to them.
  const unknown = await postTransferCoded(`${url}/counter-1/invoke`, Buffer.from('{"method":"increment"}'), 'x-custom, chunked');
  assert.equal(unknown.status, 501);
  assert.equal((await unknown.json()).code, 'unsupported_transfer_encoding');
  assert.deepEqual((await getJson(`${url}/counter-1/state`)).body.state, { count: 0, log: [] });
  // Chunked alone, in any case, is read as usual.
  assert.equal((await (await postTransferCoded(`${url}/counter-1/chat`, Buffer.from('{"message":"hi"}'), 'Chunked')).json()).response, 'hi');
  // So is chunked beside empty list elements, which Node's parser ignores (an empty Transfer-Encoding line joined to a chunked one).
  const listed = await postTransferCoded(`${url}/counter-1/chat`, Buffer.from('{"message":"hi"}'), ', chunked');
  assert.equal(listed.status, 200);
  assert.equal((await listed.json()).response, 'hi');
  assert.deepEqual(logged, []);
});

test('matches() agrees with what handle() answers', async (t) => {
  const router = registryRouter({ prefix: '/agents', openapi: true });
  const { url, close } = await listen((req, res) => {
    const claimed = router.matches(req.method, req.url ?? '/');
    router.handle(req, res).then((handled) => {
      assert.equal(handled, claimed, `${req.method} ${req.url}`);
      if (!handled) res.end('host');
    });
  });
  t.after(close);
  for (const [method, path, owned] of [
    ['GET', '/agents/counter-1/state', true],
    ['POST', '/agents/counter-1/state', true],
    ['GET', '/agents/openapi.json', true],
    ['GET', '/agents/x/y/z', false],
    ['GET', '/elsewhere', false],
    ['GET', '/agents', false],
  ] as const) {
    assert.equal(router.matches(method, path), owned, `${method} ${path}`);
    const res = await fetch(`${url}${path}`, { method });
    await res.arrayBuffer();
  }
});

test('an error Node cannot write as given, or a logger that throws, is answered 500 and the process lives on', async (t) => {
  assert.throws(() => new AgentRouterError(99, 'odd', 'x'), /integer from 400 to 599; got 99/);
  assert.throws(() => new AgentRouterError(409, 'odd', 'x', { headers: { 'X-A': 'a\nb' } }), { code: 'ERR_INVALID_CHAR' });
  // Mangled after construction, where the constructor's check cannot see it.
  const failures: Record<string, () => unknown> = {
    status: () => Object.assign(new AgentRouterError(409, 'odd', 'x'), { status: 99 }),
    header: () => Object.assign(new AgentRouterError(409, 'odd', 'x'), { headers: { 'X-A': 'a\nb' } }),
    logged: () => new Error('a 500 the logger is asked about'),
  };
  class Odd extends Agent {
    static override actions = ['fail'];
    async fail(kind: string): Promise<never> {
      throw (failures[kind] as () => unknown)();
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Odd);
  const throwingLogger = { error: () => { throw new Error('the logger is down'); } };
  const { url, close } = await listen(new AgentRouter(registry, { logger: throwingLogger }).toRequestListener());
  t.after(close);
  const quiet = t.mock.method(console, 'error', () => {});
  for (const kind of Object.keys(failures)) {
    const res = await postJson(`${url}/odd-1/invoke`, { method: 'fail', params: [kind] });
    assert.equal(res.status, 500, kind);
    assert.deepEqual(res.body, { error: 'Internal error', code: 'internal_error' }, kind);
  }
  assert.ok(quiet.mock.calls.some((call) => String(call.arguments.at(-2)).includes('the logger is down')), 'the logger\'s own failure goes to the console');
  assert.equal((await getJson(`${url}/odd-1/state`)).status, 200, 'still serving');
});

test('bodies: JSON must be UTF-8 (another charset or a compressed body is 415, invalid bytes 400); a byte order mark is skipped', async (t) => {
  const { url, close } = await listen(registryRouter().toRequestListener());
  t.after(close);
  const send = (body: BodyInit, headers: Record<string, string>) =>
    fetch(`${url}/counter-1/chat`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
  const latin1 = await send('{"message":"caf\u00e9"}', { 'content-type': 'application/json; charset=latin1' });
  assert.equal(latin1.status, 415);
  assert.match((await latin1.json()).error, /Charset "latin1" is not supported; send JSON as UTF-8/);
  const utf8 = await send('{"message":"caf\u00e9"}', { 'content-type': 'application/json; charset="UTF-8"' });
  assert.equal((await utf8.json()).response, 'caf\u00e9');
  const gzip = await send('{"message":"x"}', { 'content-encoding': 'gzip' });
  assert.equal(gzip.status, 415);
  assert.match((await gzip.json()).error, /Content-Encoding "gzip" is not supported/);
  const bytes = await send(new Uint8Array([...Buffer.from('{"message":"'), 0xff, 0xfe, ...Buffer.from(' x"}')]), {});
  assert.equal(bytes.status, 400);
  assert.deepEqual(await bytes.json(), { error: 'Invalid JSON body: not valid UTF-8', code: 'invalid_json' });
  const bom = await send('\ufeff{"message":"marked"}', {});
  assert.equal((await bom.json()).response, 'marked');
  // A number JSON can write but JavaScript holds only as Infinity, which no reply or state can carry.
  // A long number with a short exponent overflows too: 1 and 290 zeros, times 1e99.
  for (const huge of ['1e999', '-1e999', '9'.repeat(400), `1${'0'.repeat(290)}e99`]) {
    const refused = await send(`{"message":"x","n":${huge}}`, {});
    assert.equal(refused.status, 400, huge.slice(0, 10));
    assert.deepEqual(await refused.json(), { error: 'Invalid JSON body: a number is too large to represent (it would be Infinity)', code: 'invalid_json' });
  }
  assert.equal((await (await send('{"message":"room e100, 1e300 guests","n":1e300}', {})).json()).response, 'room e100, 1e300 guests');
});

test('the generic envelope takes invoke bare beside "action" too, and says what is wrong with a payload that is not an object', async (t) => {
  const { url, close } = await listen(registryRouter().toRequestListener());
  t.after(close);
  assert.deepEqual(noTurnId((await postJson(`${url}/counter-1`, { action: 'invoke', method: 'increment', params: { by: 3 } })).body), { agent_id: 'counter-1', result: 3 });
  const bad = await postJson(`${url}/counter-1`, { action: 'invoke', payload: 'increment' });
  assert.equal(bad.status, 400);
  assert.match(bad.body.error, /^"payload" must be an object/);
  assert.equal((await postJson(`${url}/counter-1/invoke`, { payload: ['increment'] })).body.code, 'invalid_body');
});

test('a client that leaves while an async authorize hook runs starts no turn and makes no agent (the generic envelope reads its body first)', async (t) => {
  const asked = deferred();
  const allow = deferred();
  const created: string[] = [];
  const router = registryRouter({
    authorize: async () => {
      asked.resolve();
      await allow.promise;
      return true;
    },
    onCreate: (agent) => created.push(agent.id),
  });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  const client = new AbortController();
  const request = fetch(`${url}/counter-5`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"message":"hello"}', signal: client.signal });
  request.catch(() => {});
  await asked.promise;
  client.abort();
  await new Promise((resolve) => setTimeout(resolve, 50)); // the server sees the connection close
  allow.resolve();
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.deepEqual(created, [], 'no agent was made');
  assert.equal(router.pool?.peek('counter-5'), undefined);
});

test("a host's callback for an answered request that throws is called once and logged, never thrown into the turn", async (t) => {
  const logged: string[] = [];
  const router = new AgentRouter(new Counter('solo'), { logger: { error: (message) => void logged.push(message) } });
  const shut = new AbortController();
  shut.abort(new AgentRouterError(503, 'shutting_down', 'Server is shutting down', { expose: true }));
  let calls = 0;
  const errors: unknown[] = [];
  const onError = (error: unknown): void => void errors.push(error);
  process.on('uncaughtException', onError);
  t.after(() => process.off('uncaughtException', onError));
  const { url, close } = await listen((req, res) => {
    const warm = req.headers['x-warm'] !== undefined;
    const answered = warm ? () => {} : () => {
      calls++;
      throw new Error("the host's bug");
    };
    // A body the host parsed and a signal already aborted: the chat fails inside the call, synchronously.
    router[serveRequest](req, res, answered, { body: { message: 'hi' }, signal: warm ? undefined : shut.signal });
  });
  t.after(close);
  await postJson(`${url}/chat`, { message: 'loads the agent' }, { 'x-warm': '1' });
  const refused = await postJson(`${url}/chat`, { message: 'hi' });
  assert.deepEqual([refused.status, refused.body.code], [503, 'shutting_down']);
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.equal(calls, 1);
  assert.deepEqual(errors, []);
  assert.ok(logged.some((message) => message.includes("callback for an answered request threw")), JSON.stringify(logged));
  // Served on (the handler hands every request the same parsed body).
  assert.deepEqual(noTurnId((await postJson(`${url}/chat`, { message: 'hi' }, { 'x-warm': '1' })).body), { agent_id: 'solo', response: 'hi' });
});

test('a string pattern that is no regex on its own (an unbalanced group) throws at register and serves no id', async (t) => {
  const registry = new AgentRegistry();
  registry.register('counter-[0-9]+', Counter);
  // Wrapped as ^(?:...)$, 'admin)|(?:.*' would compile to ^(?:admin)|(?:.*)$: anchored at neither end.
  assert.throws(() => registry.register('admin)|(?:.*', Counter), /pattern admin\)\|\(\?:\.\* does not compile/);
  assert.throws(() => registry.register('a)|(b', Counter), /does not compile/);
  const { url, close } = await listen(new AgentRouter(registry, { logger: { error: () => {} } }).toRequestListener());
  t.after(close);

  const guest = await getJson(`${url}/guest/state`);
  assert.equal(guest.status, 404);
  assert.equal((guest.body as { code: string }).code, 'agent_not_found');
  assert.equal((await getJson(`${url}/counter-1/state`)).status, 200);
});
