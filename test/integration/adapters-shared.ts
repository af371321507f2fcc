// Shared by the adapter tests: one registry router fixture, and the checks
// every framework mount must pass (DESIGN.md sections 2 and 3), so Express,
// Koa and Fastify are held to exactly the same behaviour.
import assert from 'node:assert/strict';
import type { TestContext } from 'node:test';
import { gzipSync } from 'node:zlib';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouter, type AgentRouterOptions } from '../../src/router/router.ts';
import { echoModel } from '../../src/models/echo.ts';
import type { Model } from '../../src/models/model.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { postTransferCoded } from '../helpers/http.ts';
import { collectSSE } from '../helpers/sse.ts';
import { noTurnId } from '../helpers/turns.ts';

/** The body limit every fixture router uses, small so the 413 test sends little. */
export const BODY_LIMIT = 1024;

export interface Fixture {
  router: AgentRouter;
  /** Resolves with the abort reason the waiting model saw (the disconnect test). */
  aborted: Promise<unknown>;
  /** Resolves once a waiting model began its reply. */
  started: Promise<void>;
  /** `req.originalUrl` of each request the authorize hook saw (Express keeps it). */
  originalUrls: string[];
}

/**
 * A registry router: `counter-N` (echo model, an `increment` action),
 * `waiter-N` (a model that says "started" and then waits for its signal);
 * any other id is unknown (404).
 */
export function makeRegistryRouter(options: AgentRouterOptions = {}): Fixture {
  const storage = new MemoryStorage();
  let seeAbort: (reason: unknown) => void = () => {};
  const aborted = new Promise<unknown>((resolve) => (seeAbort = resolve));
  let seeStart: () => void = () => {};
  const started = new Promise<void>((resolve) => (seeStart = resolve));
  const waiting: Model = {
    name: 'waiter',
    async *stream({ signal }) {
      seeStart();
      yield 'started';
      await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
      seeAbort(signal.reason);
    },
  };
  class Counter extends Agent<{ count: number }> {
    static override actions = ['increment', 'echo'];
    constructor(id: string) {
      super(id, { model: echoModel(), initialState: { count: 0 }, storage });
    }
    async echo(params: unknown): Promise<unknown> {
      return params;
    }
    async increment({ by = 1 }: { by?: number } = {}): Promise<number> {
      await this.setState({ count: this.state.count + by });
      return this.state.count;
    }
  }
  class Waiter extends Agent {
    constructor(id: string) {
      super(id, { model: waiting, storage });
    }
  }
  const registry = new AgentRegistry();
  registry.register('counter-[0-9]+', Counter);
  registry.register('waiter-[0-9]+', Waiter);
  const originalUrls: string[] = [];
  const router = new AgentRouter(registry, {
    bodyLimit: BODY_LIMIT,
    pingInterval: 0,
    authorize: (req) => {
      const original = (req as { originalUrl?: string }).originalUrl;
      if (original !== undefined) originalUrls.push(original);
      return true;
    },
    ...options,
  });
  return { router, aborted, started, originalUrls };
}

/** A single-agent router (echo model, fresh storage). */
export function makeSingleRouter(options: AgentRouterOptions = {}): AgentRouter {
  return new AgentRouter(new Agent('bot', { model: echoModel(), storage: new MemoryStorage() }), { bodyLimit: BODY_LIMIT, ...options });
}

const JSON_HEADERS = { 'content-type': 'application/json' };

/** POSTs `text` with no Content-Length (chunked), as a client streaming its upload does. */
export function postChunked(url: string, text: string, headers: Record<string, string> = JSON_HEADERS): Promise<Response> {
  const body = new ReadableStream({
    start(controller) {
      controller.enqueue(new TextEncoder().encode(text));
      controller.close();
    },
  });
  return fetch(url, { method: 'POST', headers, body, duplex: 'half' } as RequestInit);
}

export function post(url: string, body: unknown, headers: Record<string, string> = JSON_HEADERS): Promise<Response> {
  return fetch(url, { method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body) });
}

/** Asserts the router's error shape: the status, JSON `{"error", "code"}`. */
export async function assertError(res: Response, status: number, code: string | readonly string[]): Promise<void> {
  const text = await res.text();
  assert.equal(res.status, status, `status of ${text}`);
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
  const body = JSON.parse(text) as { error: unknown; code: unknown };
  assert.equal(typeof body.error, 'string');
  assert.ok(typeof code === 'string' ? body.code === code : code.includes(body.code as string), `code ${String(body.code)}`);
  assert.deepEqual(Object.keys(body).sort(), ['code', 'error']);
}

export interface RouteChecks {
  /** The origin, e.g. `http://127.0.0.1:1234`. */
  origin: string;
  /** Where the router's routes start, e.g. `/api` or `/api/v1`. */
  base: string;
  fixture: Fixture;
  /** What happens to `__proto__` / `constructor` keys: dropped (the router's rule), or the whole body refused (Fastify's parser). */
  unsafeKeys?: 'dropped' | 'refused';
  /** A host body parser reads the body before the router (express.json(), @koa/bodyparser), so its refusals are the host's. */
  hostParser?: boolean;
}

/**
 * The whole route table through one mount: chat, stream, invoke, state, the
 * generic envelope, every error status a request can cause, fall-through to
 * the host's routes, and a client disconnect that aborts the turn.
 */
export async function checkRegistryRoutes(
  t: TestContext,
  { origin, base, fixture, unsafeKeys = 'dropped', hostParser = false }: RouteChecks,
): Promise<void> {
  const api = `${origin}${base}`;

  await t.test('chat', async () => {
    const res = await post(`${api}/counter-1/chat`, { message: 'hello there' });
    assert.equal(res.status, 200);
    assert.deepEqual(noTurnId(await res.json()), { agent_id: 'counter-1', response: 'hello there' });
  });

  await t.test('chat?stream=true streams SSE', async () => {
    const res = await fetch(`${api}/counter-1/chat?stream=true`, {
      method: 'POST',
      headers: { ...JSON_HEADERS, accept: 'text/event-stream' },
      body: JSON.stringify({ message: 'hi there\nworld' }),
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'text/event-stream');
    assert.equal(res.headers.get('cache-control'), 'no-cache');
    const { text, events } = await collectSSE(res);
    assert.equal(text, 'hi there\nworld');
    assert.equal(events.at(-1)?.event, 'done');
    assert.equal(events.at(-1)?.data, '[DONE]');
  });

  await t.test('invoke, bare and wrapped in payload', async () => {
    const bare = await post(`${api}/counter-2/invoke`, { method: 'increment', params: { by: 2 } });
    assert.deepEqual(noTurnId(await bare.json()), { agent_id: 'counter-2', result: 2 });
    const wrapped = await post(`${api}/counter-2/invoke`, { payload: { method: 'increment', params: { by: 3 } } });
    assert.deepEqual(noTurnId(await wrapped.json()), { agent_id: 'counter-2', result: 5 });
  });

  await t.test('state', async () => {
    const res = await fetch(`${api}/counter-2/state`);
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { agent_id: 'counter-2', state: { count: 5 } });
  });

  await t.test('HEAD state: the GET answer\'s status and headers, no body', async () => {
    const res = await fetch(`${api}/counter-2/state`, { method: 'HEAD' });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'application/json; charset=utf-8');
    assert.equal(await res.text(), '');
  });

  await t.test('generic envelope: invoke, chat (the default), state', async () => {
    assert.deepEqual(noTurnId(await (await post(`${api}/counter-3`, { action: 'invoke', payload: { method: 'increment' } })).json()), { agent_id: 'counter-3', result: 1 });
    assert.deepEqual(noTurnId(await (await post(`${api}/counter-3`, { message: 'yo' })).json()), { agent_id: 'counter-3', response: 'yo' });
    assert.deepEqual(await (await post(`${api}/counter-3/`, { action: 'state' })).json(), { agent_id: 'counter-3', state: { count: 1 } });
  });

  await t.test(`keys named __proto__ and constructor are ${unsafeKeys}`, async () => {
    const res = await post(`${api}/counter-4/invoke`, '{"method":"echo","params":{"a":1,"__proto__":{"x":1},"nested":[{"constructor":{"y":2},"b":2}]}}');
    if (unsafeKeys === 'refused') return assertError(res, 400, 'invalid_json');
    assert.deepEqual(noTurnId(await res.json()), { agent_id: 'counter-4', result: { a: 1, nested: [{ b: 2 }] } });
  });

  await t.test('invalid JSON is 400 invalid_json', async () => {
    await assertError(await post(`${api}/counter-1/chat`, '{"message":'), 400, 'invalid_json');
  });

  await t.test('a JSON body that is empty reads as {}, as on node:http: chat says its message is missing', async () => {
    await assertError(await post(`${api}/counter-1/chat`, ''), 400, 'missing_message');
  });

  await t.test('a body over the limit is 413 body_too_large', async () => {
    await assertError(await post(`${api}/counter-1/chat`, { message: 'x'.repeat(BODY_LIMIT * 4) }), 413, 'body_too_large');
  });

  await t.test('a body over the limit is 413 without a declared length too (chunked), and compressed: never reaches the agent', async () => {
    const big = JSON.stringify({ message: 'x'.repeat(BODY_LIMIT * 4) });
    await assertError(await postChunked(`${api}/counter-1/chat`, big), 413, 'body_too_large');
    // node:http refuses any Content-Encoding (415); a host parser that inflates it must still hold the limit (413).
    const gzipped = await fetch(`${api}/counter-1/chat`, { method: 'POST', headers: { ...JSON_HEADERS, 'content-encoding': 'gzip' }, body: gzipSync(big) });
    const refusal = gzipped.status === 415 ? 'unsupported_media_type' : 'body_too_large';
    await assertError(gzipped, gzipped.status === 415 ? 415 : 413, refusal);
    // Compressed to more than the limit too (gzip cannot shrink noise): it was 415 "send the body uncompressed".
    const noise = Array.from({ length: BODY_LIMIT }, () => Math.random().toString(36).slice(2)).join('');
    const packed = gzipSync(JSON.stringify({ message: noise }));
    assert.ok(packed.length > BODY_LIMIT);
    const inflated = await fetch(`${api}/counter-1/chat`, { method: 'POST', headers: { ...JSON_HEADERS, 'content-encoding': 'gzip' }, body: packed });
    if (hostParser) await assertError(inflated, 413, 'body_too_large');
    else await assertError(inflated, 415, 'unsupported_media_type');
  });

  await t.test('a transfer coding other than chunked is 501 where the router reads the body; a host parser refuses the still-coded bytes', async () => {
    // Node's parser takes `gzip, chunked` and hands on the bytes still gzipped; no framework decodes them.
    const coded = await postTransferCoded(`${api}/counter-1/chat`, gzipSync(JSON.stringify({ message: 'hi' })), 'gzip, chunked');
    if (hostParser) return assertError(coded, 400, 'invalid_json');
    await assertError(coded, 501, 'unsupported_transfer_encoding');
  });

  await t.test('a declared charset other than UTF-8 is 415, even when a host parser would decode it', async () => {
    const res = await post(`${api}/counter-1/chat`, '{"message":"hi"}', { 'content-type': 'application/json; charset=iso-8859-1' });
    await assertError(res, 415, 'unsupported_media_type');
  });

  await t.test('a declared non-JSON type is 415', async () => {
    await assertError(await post(`${api}/counter-1/chat`, 'message=hi', { 'content-type': 'text/plain' }), 415, 'unsupported_media_type');
    const form = await post(`${api}/counter-1/chat`, 'message=hi', { 'content-type': 'application/x-www-form-urlencoded' });
    await assertError(form, 415, 'unsupported_media_type');
  });

  await t.test('a body with no Content-Type is 415 (a page on any site can send one without a preflight); no body needs none', async () => {
    // What a cross-site page's fetch with a Blob body sends: no Content-Type, so no CORS preflight.
    const blob = await fetch(`${api}/counter-77/invoke`, { method: 'POST', body: new Blob([JSON.stringify({ method: 'increment' })]) });
    await assertError(blob, 415, 'unsupported_media_type');
    await assertError(await postChunked(`${api}/counter-77/invoke`, '{"method":"increment"}', {}), 415, 'unsupported_media_type');
    const state = await (await fetch(`${api}/counter-77/state`)).json();
    assert.deepEqual(state, { agent_id: 'counter-77', state: { count: 0 } }, 'neither request reached the agent');
    // No body at all: nothing to declare, so the route's own answer (here: no message).
    await assertError(await fetch(`${api}/counter-1/chat`, { method: 'POST' }), 400, 'missing_message');
  });

  await t.test('missing message is 400 missing_message', async () => {
    await assertError(await post(`${api}/counter-1/chat`, { text: 'hi' }), 400, 'missing_message');
  });

  await t.test('unknown agent id is 404 agent_not_found', async () => {
    await assertError(await post(`${api}/nobody/chat`, { message: 'hi' }), 404, 'agent_not_found');
  });

  await t.test('bad agent id is 400 bad_agent_id', async () => {
    await assertError(await post(`${api}/bad%00id/chat`, { message: 'hi' }), 400, 'bad_agent_id');
  });

  await t.test('wrong method is 405 with Allow', async () => {
    const res = await fetch(`${api}/counter-1/chat`);
    assert.equal(res.headers.get('allow'), 'POST');
    await assertError(res, 405, 'method_not_allowed');
  });

  await t.test('unknown action in the envelope is 400 unknown_action', async () => {
    await assertError(await post(`${api}/counter-1`, { action: 'explode' }), 400, 'unknown_action');
  });

  await t.test('paths that are not the router\'s fall through to the host', async () => {
    const host = await fetch(`${origin}/api/host/info`);
    assert.equal(host.status, 200);
    assert.deepEqual(await host.json(), { host: 'info' });
    const health = await fetch(`${origin}/health`);
    assert.equal(await health.text(), 'ok');
    // One segment under the mount has the generic route's shape (POST /{agent_id}); any other method is the host's.
    const status = await fetch(`${api}/status`);
    assert.equal(status.status, 200, 'a host GET route one segment under the mount');
    assert.equal(await status.text(), 'up');
    const hostPost = await post(`${origin}/api/host/echo`, { hello: 'host' });
    assert.deepEqual(await hostPost.json(), { echoed: { hello: 'host' } }, 'the host parses its own bodies');
    const unknown = await fetch(`${api}/counter-1/chat/extra/segments`);
    assert.equal(unknown.status, 404);
    const body = await unknown.text();
    assert.doesNotMatch(body, /"code":"not_found"/, 'the framework answers, not the router');
  });

  await t.test('a client disconnect mid-stream aborts the turn', async () => {
    const controller = new AbortController();
    const res = await fetch(`${api}/waiter-1/chat?stream=true`, {
      method: 'POST',
      headers: JSON_HEADERS,
      body: JSON.stringify({ message: 'wait' }),
      signal: controller.signal,
    });
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    let seen = '';
    while (!seen.includes('data: started')) {
      const { value, done } = await reader.read();
      assert.equal(done, false, 'the stream ended before the first event');
      seen += new TextDecoder().decode(value);
    }
    controller.abort();
    const reason = await fixture.aborted;
    assert.equal((reason as { code?: unknown }).code, 'client_closed');
  });
}

/** A single-agent router mounted at `base`: its four routes, including the bare prefix. */
export async function checkSingleRoutes(t: TestContext, origin: string, base: string): Promise<void> {
  await t.test('single agent: chat, state, generic at the bare mount path', async () => {
    assert.deepEqual(noTurnId(await (await post(`${origin}${base}/chat`, { message: 'hi bot' })).json()), { agent_id: 'bot', response: 'hi bot' });
    assert.deepEqual(await (await fetch(`${origin}${base}/state`)).json(), { agent_id: 'bot', state: {} });
    assert.deepEqual(await (await post(`${origin}${base}`, { action: 'state' })).json(), { agent_id: 'bot', state: {} });
    assert.deepEqual(noTurnId(await (await post(`${origin}${base}/`, { message: 'again' })).json()), { agent_id: 'bot', response: 'again' });
    await assertError(await post(`${origin}${base}/invoke`, { method: 'nope' }), 404, 'unknown_method');
  });
}

/** `GET {base}/openapi.json` through the mount, with the `openapi` option on. */
export async function checkServedOpenAPI(t: TestContext, url: string, firstPath: string, mountPath: string | undefined): Promise<void> {
  await t.test('openapi.json is served through the mount, its server naming the mount path', async () => {
    const res = await fetch(url);
    assert.equal(res.status, 200);
    const doc = (await res.json()) as { openapi: string; paths: Record<string, unknown>; servers?: Array<{ url: string }> };
    assert.equal(doc.openapi, '3.1.0');
    assert.ok(firstPath in doc.paths, `${firstPath} in ${Object.keys(doc.paths).join(', ')}`);
    assert.deepEqual(doc.servers, mountPath === undefined ? undefined : [{ url: mountPath }]);
    // What a docs page (Swagger UI) does: the server's url, relative to the document's, then the path.
    const chat = new URL(`${doc.servers?.[0]?.url ?? ''}${firstPath.replace('{agent_id}', 'counter-1')}`, url);
    assert.deepEqual(noTurnId(await (await post(chat.href, { message: 'from the docs' })).json()), { agent_id: 'counter-1', response: 'from the docs' });
  });
}
