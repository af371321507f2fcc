import assert from 'node:assert/strict';
import http from 'node:http';
import test, { type TestContext } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouterError, ModelProviderError } from '../../src/errors.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { scriptedModel, type ScriptedFunction } from '../../src/models/scripted.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { HTTPTransport } from '../../src/transports/http.ts';
import { deferred, getJson, postJson, streamChat } from '../helpers/http.ts';
import { listen } from '../helpers/listen.ts';
import { collectSSE, withoutIds } from '../helpers/sse.ts';
import { noTurnId } from '../helpers/turns.ts';

// Real routers on loopback: A's registry sends `remote-.*` to B through an
// HTTPTransport; B (and C, for three hops) serve the agents themselves.

interface Seen {
  url: string;
  headers: http.IncomingHttpHeaders;
}

interface Hop {
  /** Where clients reach this router's registry: `http://127.0.0.1:port/agent`. */
  base: string;
  /** Every request this router received, as it arrived. */
  seen: Seen[];
  /** What this router logged: the message of each logged error. */
  logged: string[];
}

/** What B's agents say; a test may replace it to hold a turn or fail it. */
type Script = { current: ScriptedFunction };

function agentClasses(script: Script) {
  const storage = new MemoryStorage();
  class Counter extends Agent<{ count: number }> {
    static override actions = ['increment', 'add', 'explode', 'refuse'];
    constructor(id: string) {
      super(id, { model: scriptedModel((request) => script.current(request)), storage, initialState: { count: 0 } });
    }
    async increment({ by = 1 }: { by?: number } = {}): Promise<number> {
      await this.setState({ count: this.state.count + by });
      return this.state.count;
    }
    async add(a: number, b: number): Promise<number> {
      return a + b;
    }
    async explode(): Promise<never> {
      throw new Error('secret detail that must stay in the log');
    }
    async refuse({ status, code }: { status: number; code: string }): Promise<never> {
      throw new AgentRouterError(status, code, `Refused with ${code}`);
    }
  }
  return Counter;
}

/** A router at `/agent` whose registry sends `remote-.*` to `next` (when given) and everything else to local agents. */
async function hop(
  t: TestContext,
  options: { next?: Hop; script?: Script; headers?: Record<string, string>; forwardHeaders?: string[]; turnTimeout?: number } = {},
): Promise<Hop> {
  const registry = new AgentRegistry();
  if (options.next !== undefined) {
    const headers = options.headers ?? { Authorization: 'Bearer hop-token' };
    registry.register('remote-.*', new HTTPTransport(options.next.base, { headers, forwardHeaders: options.forwardHeaders }));
  } else {
    registry.register('(remote-)?(counter|bot)-.*', agentClasses(options.script ?? { current: echo }));
  }
  const logged: string[] = [];
  const logger = { error: (_message: string, error?: unknown) => void logged.push(error instanceof Error ? error.message : String(error)) };
  const router = new AgentRouter(registry, { prefix: '/agent', pingInterval: 0, logger, turnTimeout: options.turnTimeout });
  const listener = router.toRequestListener();
  const seen: Seen[] = [];
  const { url, close } = await listen((req, res) => {
    seen.push({ url: req.url ?? '', headers: req.headers });
    listener(req, res);
  });
  t.after(close);
  return { base: `${url}/agent`, seen, logged };
}

/** What A answers for an error B sent its caller: B's status and code, the message naming B's origin. */
function viaA(body: { error: string; code: string }, b: Hop): { error: string; code: string } {
  return { ...body, error: `${body.error} (from the remote agent server at ${new URL(b.base).origin})` };
}

const echo: ScriptedFunction = ({ messages }) => `echo: ${messages.at(-1)?.content ?? ''}`;

/** A and B, B serving the agents. */
async function pair(t: TestContext, script: Script = { current: echo }) {
  const b = await hop(t, { script });
  const a = await hop(t, { next: b });
  return { a, b };
}

test('every route through A answers as B does: same status, same body', async (t) => {
  const { a, b } = await pair(t);
  // Each pair of ids starts fresh, so A (via B) and B directly see the same history.
  const cases: Array<[string, (base: string, id: string) => Promise<{ status: number; body: any }>]> = [
    ['chat', (base, id) => postJson(`${base}/${id}/chat`, { message: 'hello' })],
    ['invoke', (base, id) => postJson(`${base}/${id}/invoke`, { method: 'increment', params: { by: 2 } })],
    ['invoke wrapped', (base, id) => postJson(`${base}/${id}/invoke`, { payload: { method: 'increment' } })],
    ['invoke positional', (base, id) => postJson(`${base}/${id}/invoke`, { method: 'add', params: [2, 3] })],
    ['state', (base, id) => getJson(`${base}/${id}/state`)],
    ['envelope chat', (base, id) => postJson(`${base}/${id}`, { action: 'chat', message: 'hi' })],
    ['envelope default', (base, id) => postJson(`${base}/${id}`, { message: 'default is chat' })],
    ['envelope invoke', (base, id) => postJson(`${base}/${id}`, { action: 'invoke', payload: { method: 'increment', params: { by: 5 } } })],
    ['envelope state', (base, id) => postJson(`${base}/${id}`, { action: 'state' })],
    ['unknown method', (base, id) => postJson(`${base}/${id}/invoke`, { method: 'constructor' })],
    ['missing method', (base, id) => postJson(`${base}/${id}/invoke`, { params: {} })],
    ['missing message', (base, id) => postJson(`${base}/${id}/chat`, {})],
    ['invalid JSON', (base, id) => postJson(`${base}/${id}/chat`, '{"message":')],
    ['unknown action', (base, id) => postJson(`${base}/${id}`, { action: 'dance' })],
  ];
  for (const [name, request] of cases) {
    const direct = await request(b.base, `remote-counter-b-${name.replace(/ /g, '-')}`);
    const proxied = await request(a.base, `remote-counter-a-${name.replace(/ /g, '-')}`);
    // A relayed error names B's origin (see viaA); the rest of the body is B's.
    const normalize = (body: any) => noTurnId(JSON.parse(JSON.stringify(body).replace(/remote-counter-[ab]-/g, 'remote-counter-X-').replace(/ \(from the remote agent server at [^)]+\)/, '')));
    assert.equal(proxied.status, direct.status, name);
    assert.deepEqual(normalize(proxied.body), normalize(direct.body), name);
  }
  // After the proxied envelope invoke the remote counter is at 5, and state through A says so.
  assert.deepEqual((await getJson(`${a.base}/remote-counter-a-envelope-invoke/state`)).body, { agent_id: 'remote-counter-a-envelope-invoke', state: { count: 5 } });
});

test('forwardHeaders sends the named headers of the caller\'s request on to the remote, on every route, and nothing else of the caller\'s', async (t) => {
  const b = await hop(t);
  const a = await hop(t, { next: b, headers: { 'x-gateway': 'a' }, forwardHeaders: ['Authorization', 'X-Tenant-Id', 'cookie'] });
  const caller = { authorization: 'Bearer user-7', 'x-tenant-id': 'acme', cookie: 'session=s1', 'x-other': 'stays here' };
  assert.equal((await postJson(`${a.base}/remote-counter-f/chat`, { message: 'hi' }, caller)).status, 200);
  assert.equal((await postJson(`${a.base}/remote-counter-f/invoke`, { method: 'increment' }, caller)).status, 200);
  assert.equal((await getJson(`${a.base}/remote-counter-f/state`, caller)).status, 200);
  const stream = await fetch(`${a.base}/remote-counter-f/chat?stream=true`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...caller },
    body: JSON.stringify({ message: 'streamed' }),
  });
  assert.equal((await collectSSE(stream)).text, 'echo: streamed');
  const forwarded = (seen: Seen) => [seen.headers.authorization, seen.headers['x-tenant-id'], seen.headers.cookie, seen.headers['x-gateway'], seen.headers['x-other']];
  assert.deepEqual(b.seen.map(forwarded), Array(4).fill(['Bearer user-7', 'acme', 'session=s1', 'a', undefined]));
  // A caller without them: nothing in their place.
  assert.equal((await getJson(`${a.base}/remote-counter-f/state`)).status, 200);
  assert.deepEqual(forwarded(b.seen.at(-1) as Seen), [undefined, undefined, undefined, 'a', undefined]);
});

test('forwardHeaders refuses, when the transport is made, a name the transport or its connection owns, or one also configured', () => {
  const refused = (forwardHeaders: unknown, message: RegExp, headers?: Record<string, string>) =>
    assert.throws(() => new HTTPTransport('http://127.0.0.1:1/agent', { headers, forwardHeaders } as never), (error: Error) => error instanceof TypeError && message.test(error.message), String(forwardHeaders));
  refused(['Accept'], /cannot name accept: the transport sets it itself/);
  refused(['x-request-id'], /cannot name x-request-id: the transport sets it itself/);
  for (const name of ['Host', 'Content-Length', 'transfer-encoding', 'Connection', 'TE']) refused([name], new RegExp(`cannot name ${name.toLowerCase()}: the transport's fetch and connection own it`));
  refused(['authorization'], /authorization is in both headers and forwardHeaders/, { Authorization: 'Bearer hop' });
  refused(['bad name'], /forwardHeaders holds "bad name", which is not a header name/);
  refused([42], /forwardHeaders holds 42, which is not a header name/);
  refused('authorization', /forwardHeaders must be an array of header names/);
});

test("a remote reply the provider cut short keeps its truncated mark through the hop (JSON chat and the envelope's)", async (t) => {
  const script: Script = { current: ({ messages }) => [`cut: ${messages.at(-1)?.content ?? ''}`, { truncated: true }] };
  const { a } = await pair(t, script);
  assert.deepEqual(noTurnId((await postJson(`${a.base}/remote-bot-1/chat`, { message: 'hi' })).body), { agent_id: 'remote-bot-1', response: 'cut: hi', truncated: true });
  assert.deepEqual(noTurnId((await postJson(`${a.base}/remote-bot-1`, { action: 'chat', message: 'yo' })).body), { agent_id: 'remote-bot-1', response: 'cut: yo', truncated: true });
  script.current = echo;
  assert.deepEqual(noTurnId((await postJson(`${a.base}/remote-bot-1/chat`, { message: 'whole' })).body), { agent_id: 'remote-bot-1', response: 'echo: whole' });
});

test('remote errors: a 404 is relayed with its status and code, naming B\'s origin in its message and Agent-Router-Upstream, a 500 becomes a 502 that names the remote in the log only, never the detail', async (t) => {
  const { a, b } = await pair(t);
  const direct = await postJson(`${b.base}/remote-nobody/chat`, { message: 'x' });
  const proxied = await postJson(`${a.base}/remote-nobody/chat`, { message: 'x' });
  assert.equal(direct.status, 404);
  assert.equal(proxied.status, 404);
  assert.deepEqual(proxied.body, viaA(direct.body, b));
  assert.equal(proxied.headers.get('agent-router-upstream'), new URL(b.base).origin);
  assert.equal(direct.headers.get('agent-router-upstream'), null);

  const failed = await postJson(`${a.base}/remote-counter-1/invoke`, { method: 'explode' });
  assert.equal(failed.status, 502);
  assert.equal(failed.body.code, 'upstream_error');
  // The caller is not told where the remote is (often an internal address); the operator's log is.
  assert.equal(failed.body.error, 'The remote agent answered 500');
  assert.ok(!JSON.stringify(failed.body).includes('127.0.0.1'));
  assert.ok(!JSON.stringify(failed.body).includes('secret'));
  assert.ok(a.logged.includes(`HTTPTransport: ${b.base}/remote-counter-1/invoke answered 500; see the remote's logs`), a.logged.join('\n'));
});

test("an action's own 4xx (AgentRouterError) reaches the caller through A as B answers it, a 403 of its own code included", async (t) => {
  const { a, b } = await pair(t);
  for (const [status, code] of [[403, 'not_owner'], [410, 'expired'], [423, 'locked'], [402, 'quota_used'], [409, 'sold_out']] as const) {
    const direct = await postJson(`${b.base}/remote-counter-1/invoke`, { method: 'refuse', params: { status, code } });
    const proxied = await postJson(`${a.base}/remote-counter-1/invoke`, { method: 'refuse', params: { status, code } });
    assert.deepEqual(direct.body, { error: `Refused with ${code}`, code });
    assert.equal(proxied.status, status, code);
    assert.deepEqual(proxied.body, viaA(direct.body, b), code);
  }
  // An action's 403 spelled as an authorize refusal is taken as B refusing A's credentials: the operator's to fix.
  const refused = await postJson(`${a.base}/remote-counter-1/invoke`, { method: 'refuse', params: { status: 403, code: 'forbidden' } });
  assert.equal(refused.status, 502);
  assert.deepEqual(refused.body, { error: 'The remote agent refused the request (403)', code: 'upstream_refused' });
});

test("a turn that timed out on B is a 504 turn_timeout through A, JSON as streamed, not a 502 saying the hop broke", async (t) => {
  // A model that honours its signal and never answers: B cuts the turn at its turnTimeout.
  const script: Script = { current: ({ signal }) => new Promise<string>((_resolve, reject) => signal?.addEventListener('abort', () => reject(signal.reason))) };
  const b = await hop(t, { script, turnTimeout: 0.2 });
  const a = await hop(t, { next: b });
  const direct = await postJson(`${b.base}/remote-bot-1/chat`, { message: 'x' });
  assert.equal(direct.status, 504);
  const proxied = await postJson(`${a.base}/remote-bot-2/chat`, { message: 'x' });
  assert.equal(proxied.status, 504);
  assert.deepEqual(proxied.body, viaA(direct.body, b));
  assert.equal(proxied.body.code, 'turn_timeout');
  const streamed = await collectSSE(await streamChat(`${a.base}/remote-bot-3/chat`, 'x'));
  assert.deepEqual(streamed.events.map((event) => [event.event, JSON.parse(event.data)]), [['error', viaA(direct.body, b)]]);
});

test("B's own 502 about its remote (C down) reaches the caller through A with B's code and message, JSON as streamed", async (t) => {
  const { url, close } = await listen(() => {});
  await close(); // C's port is now closed
  const b = await hop(t, { next: { base: `${url}/agent`, seen: [], logged: [] } });
  const a = await hop(t, { next: b });
  const direct = await postJson(`${b.base}/remote-bot-1/chat`, { message: 'x' });
  assert.equal(direct.status, 502);
  assert.deepEqual(direct.body, { error: 'The remote agent could not be reached', code: 'upstream_unreachable' });
  for (const request of [
    () => postJson(`${a.base}/remote-bot-1/chat`, { message: 'x' }),
    () => postJson(`${a.base}/remote-bot-1/invoke`, { method: 'increment' }),
    () => getJson(`${a.base}/remote-bot-1/state`),
  ]) {
    const proxied = await request();
    assert.equal(proxied.status, 502);
    assert.deepEqual(proxied.body, viaA(direct.body, b));
  }
  const streamed = await streamChat(`${a.base}/remote-bot-1/chat`, 'x');
  assert.equal(streamed.status, 502);
  assert.deepEqual(await streamed.json(), viaA(direct.body, b));
  // B's log names C, where the operator looks.
  assert.ok(b.logged.some((message) => message.startsWith(`HTTPTransport: could not reach ${url}/agent/remote-bot-1/chat`)), b.logged.join('\n'));
});

test("B's model provider failing before any text reaches the caller through A with B's code and Retry-After, not 'The remote agent answered 502'", async (t) => {
  const script: Script = {
    current: () => {
      throw new ModelProviderError('model_rate_limited', 'openai:gpt-4o-mini: provider answered HTTP 429 (SECRET)', { provider: 'openai', providerStatus: 429, retryAfter: 7 });
    },
  };
  const { a, b } = await pair(t, script);
  const direct = await postJson(`${b.base}/remote-bot-1/chat`, { message: 'x' });
  const proxied = await postJson(`${a.base}/remote-bot-2/chat`, { message: 'x' });
  assert.equal(direct.status, 502);
  assert.deepEqual(direct.body, { error: 'Request failed', code: 'model_rate_limited' });
  assert.equal(proxied.status, 502);
  assert.deepEqual(proxied.body, viaA(direct.body, b));
  assert.equal(proxied.headers.get('retry-after'), '7');
});

test('streaming through A: the same SSE framing and headers as B, byte for byte', async (t) => {
  const chunks = ['Hello', ' world\nsecond line', 'a\r\nb', ' done'];
  const { a, b } = await pair(t, { current: () => chunks[Symbol.iterator]() });
  const direct = await streamChat(`${b.base}/remote-bot-1/chat`, 'x');
  const proxied = await streamChat(`${a.base}/remote-bot-2/chat`, 'x');
  assert.equal(proxied.status, 200);
  for (const header of ['content-type', 'cache-control', 'x-accel-buffering']) {
    assert.equal(proxied.headers.get(header), direct.headers.get(header), header);
  }
  const raw = await direct.text();
  assert.equal(withoutIds(raw), 'data: Hello\n\ndata:  world\ndata: second line\n\ndata: a\ndata: b\n\ndata:  done\n\nevent: done\ndata: [DONE]\n\n');
  assert.equal(withoutIds(await proxied.text()), withoutIds(raw));
});

test('streaming through A relays chunk by chunk: the first arrives before B has finished', async (t) => {
  const gate = deferred();
  let finished = false;
  const script: Script = {
    current: async function* () {
      yield 'first';
      await gate.promise;
      yield ' second';
      finished = true;
    },
  };
  const { a } = await pair(t, script);
  const res = await streamChat(`${a.base}/remote-bot-1/chat`, 'x');
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let received = '';
  for (let i = 0; i < 100 && !received.includes('data: first\n\n'); i++) received += decoder.decode((await reader.read()).value, { stream: true });
  assert.equal(withoutIds(received), 'data: first\n\n');
  assert.equal(finished, false, 'B is still holding the rest of the reply');
  gate.resolve();
  for (let step = await reader.read(); step.done !== true; step = await reader.read()) received += decoder.decode(step.value, { stream: true });
  assert.equal(withoutIds(received), 'data: first\n\ndata:  second\n\nevent: done\ndata: [DONE]\n\n');
});

test('a stream to an id B does not know is answered as JSON 404 by A, before any SSE, naming B\'s origin', async (t) => {
  const { a, b } = await pair(t);
  const direct = await streamChat(`${b.base}/remote-nobody/chat`, 'x');
  const proxied = await streamChat(`${a.base}/remote-nobody/chat`, 'x');
  assert.equal(proxied.status, 404);
  assert.equal(proxied.headers.get('content-type'), direct.headers.get('content-type'));
  assert.equal(proxied.headers.get('agent-router-upstream'), new URL(b.base).origin);
  assert.deepEqual(await proxied.json(), viaA(await direct.json(), b));
});

test('a model failing mid-stream on B ends A\'s stream with its event: error, naming B\'s origin, never done', async (t) => {
  const script: Script = {
    current: async function* () {
      yield 'partial';
      throw new Error('model exploded with a secret');
    },
  };
  const { a, b } = await pair(t, script);
  const direct = await collectSSE(await streamChat(`${b.base}/remote-bot-1/chat`, 'x'));
  const proxied = await collectSSE(await streamChat(`${a.base}/remote-bot-2/chat`, 'x'));
  assert.deepEqual(direct.events.map((e) => e.event), ['message', 'error']);
  const relayed = (e: { event: string; data: string }) => [e.event, e.event === 'error' ? viaA(JSON.parse(e.data), b) : e.data];
  assert.deepEqual(proxied.events.map((e) => [e.event, e.event === 'error' ? JSON.parse(e.data) : e.data]), direct.events.map(relayed));
  assert.ok(!JSON.stringify(proxied.events).includes('secret'));
});

test('ids with ?, #, %, spaces and unicode reach B intact, as one segment that cannot change its path', async (t) => {
  const { a, b } = await pair(t);
  for (const id of ['remote-counter-a?b=1', 'remote-counter-a#frag', 'remote-counter-100%', 'remote-counter-two words', 'remote-counter-héllo-日本-🚀', 'remote-counter-..%2F..', 'remote-counter-%2e%2e']) {
    const reply = await postJson(`${a.base}/${encodeURIComponent(id)}/chat`, { message: 'x' });
    assert.equal(reply.status, 200, id);
    assert.equal(reply.body.agent_id, id);
    assert.equal(b.seen.at(-1)?.url, `/agent/${encodeURIComponent(id)}/chat`);
  }
  // What A refuses (a "/" after decoding, dot segments) never reaches B.
  const before = b.seen.length;
  for (const segment of ['remote-a%2Fb', '..', '%2e%2E', '.']) {
    // Sent raw: fetch would resolve the dot segments before they left.
    const reply = await rawPost(`${a.base}/${segment}/chat`, '{"message": "x"}');
    assert.equal(reply.status, 400, segment);
    assert.equal(reply.body.code, 'bad_agent_id', segment);
  }
  assert.equal(b.seen.length, before);
});

test('B sees A\'s configured credentials and never the caller\'s', async (t) => {
  const { a, b } = await pair(t);
  const callerHeaders = { authorization: 'Bearer caller-token', cookie: 'session=caller', 'x-api-key': 'caller-key', 'x-forwarded-for': '10.9.8.7' };
  await postJson(`${a.base}/remote-counter-1/chat`, { message: 'x' }, callerHeaders);
  await postJson(`${a.base}/remote-counter-1/invoke`, { method: 'increment' }, callerHeaders);
  await getJson(`${a.base}/remote-counter-1/state`, callerHeaders);
  await collectSSE(await fetch(`${a.base}/remote-counter-1/chat?stream=true`, {
    method: 'POST',
    headers: { ...callerHeaders, 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({ message: 'x' }),
  }));
  assert.equal(b.seen.length, 4);
  for (const { headers } of b.seen) {
    assert.equal(headers.authorization, 'Bearer hop-token');
    assert.equal(headers.cookie, undefined);
    assert.equal(headers['x-api-key'], undefined);
    assert.equal(headers['x-forwarded-for'], undefined);
    assert.ok(!JSON.stringify(headers).includes('caller'));
  }
});

test('a client that disconnects from A aborts the turn on B (streaming and JSON)', async (t) => {
  const started = deferred();
  const aborted = deferred<unknown>();
  const script: Script = {
    current: async function* ({ signal }) {
      yield 'first';
      started.resolve();
      await new Promise<void>((resolve) => {
        signal?.addEventListener('abort', () => {
          aborted.resolve(signal.reason);
          resolve();
        });
      });
    },
  };
  const { a } = await pair(t, script);
  const controller = new AbortController();
  const res = await streamChat(`${a.base}/remote-bot-1/chat`, 'x', { signal: controller.signal });
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  await reader.read();
  await started.promise;
  controller.abort();
  await aborted.promise; // B's model saw its signal abort: the disconnect went A -> B

  const held = deferred();
  const jsonAborted = deferred();
  script.current = ({ signal }) => {
    held.resolve();
    return new Promise<string>((_resolve, reject) => {
      signal?.addEventListener('abort', () => {
        jsonAborted.resolve();
        reject(signal.reason);
      });
    });
  };
  const jsonController = new AbortController();
  const pending = fetch(`${a.base}/remote-bot-2/chat`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ message: 'x' }),
    signal: jsonController.signal,
  });
  await held.promise;
  jsonController.abort();
  await assert.rejects(pending, { name: 'AbortError' });
  await jsonAborted.promise;
});

test('three hops, A -> B -> C: every route, streaming included, and odd ids arrive intact', async (t) => {
  const c = await hop(t);
  const b = await hop(t, { next: c, headers: { Authorization: 'Bearer b-to-c' } });
  const a = await hop(t, { next: b, headers: { Authorization: 'Bearer a-to-b' } });
  const id = 'remote-counter-ü 1?#%';
  const segment = encodeURIComponent(id);
  assert.deepEqual(noTurnId((await postJson(`${a.base}/${segment}/chat`, { message: 'three hops' })).body), { agent_id: id, response: 'echo: three hops' });
  assert.deepEqual(noTurnId((await postJson(`${a.base}/${segment}/invoke`, { method: 'increment', params: { by: 3 } })).body), { agent_id: id, result: 3 });
  assert.deepEqual(noTurnId((await postJson(`${a.base}/${segment}`, { action: 'invoke', payload: { method: 'increment' } })).body), { agent_id: id, result: 4 });
  assert.deepEqual((await getJson(`${a.base}/${segment}/state`)).body, { agent_id: id, state: { count: 4 } });
  const streamed = await collectSSE(await streamChat(`${a.base}/${segment}/chat`, 'streamed'));
  assert.equal(streamed.text, 'echo: streamed');
  assert.deepEqual({ ...streamed.events.at(-1), id: undefined }, { event: 'done', data: '[DONE]', id: undefined });
  const missing = await postJson(`${a.base}/remote-nobody/chat`, { message: 'x' });
  assert.equal(missing.status, 404);
  assert.equal(missing.body.code, 'agent_not_found');
  assert.equal(c.seen.length, 6);
  for (const request of c.seen) {
    assert.equal(request.headers.authorization, 'Bearer b-to-c');
    assert.ok(request.url.startsWith(`/agent/${segment}`) || request.url.startsWith('/agent/remote-nobody/'), request.url);
  }
  assert.ok(b.seen.every((request) => request.headers.authorization === 'Bearer a-to-b'));
});

/** One request exactly as the seed's Python client (httpx) sends it. */
function seedRequest(base: string, id: string, body: string): Promise<{ status: number; body: any }> {
  return rawPost(`${base}/${id}`, body, {
    Accept: '*/*',
    'Accept-Encoding': 'gzip, deflate',
    Connection: 'keep-alive',
    'User-Agent': 'python-httpx/0.27.2',
  });
}

/** A JSON POST whose path goes out exactly as written (no URL parser normalizes it first). */
function rawPost(target: string, body: string, extraHeaders: Record<string, string> = {}): Promise<{ status: number; body: any }> {
  const { origin, hostname, port, host } = new URL(target);
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: hostname,
      port,
      path: target.slice(origin.length),
      method: 'POST',
      headers: { Host: host, ...extraHeaders, 'Content-Length': String(Buffer.byteLength(body)), 'Content-Type': 'application/json' },
      agent: false,
    });
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

test('the seed client\'s exact requests ({base}/{id} envelopes) work directly and through a hop', async (t) => {
  const { a, b } = await pair(t);
  for (const [base, id] of [[b.base, 'remote-counter-seed-b'], [a.base, 'remote-counter-seed-a']] as const) {
    // json.dumps() spacing, as httpx's json= sends it
    const chat = await seedRequest(base, id, '{"action": "chat", "message": "hello from python"}');
    assert.equal(chat.status, 200);
    assert.equal(chat.body.response, 'echo: hello from python'); // the seed reads data.get("response")
    const invoke = await seedRequest(base, id, '{"action": "invoke", "payload": {"method": "increment", "params": {"by": 2}}}');
    assert.equal(invoke.status, 200);
    assert.equal(invoke.body.result, 2); // ...and data["result"]
    assert.ok(!('error' in invoke.body));
    const again = await seedRequest(base, id, '{"action": "invoke", "payload": {"method": "increment", "params": {}}}');
    assert.equal(again.body.result, 3);
  }
});
