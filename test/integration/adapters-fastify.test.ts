// toFastify against the real Fastify 4 and 5 (npm aliases fastify4, fastify5).
import assert from 'node:assert/strict';
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { test, type TestContext } from 'node:test';
import { PassThrough, pipeline, Readable } from 'node:stream';
import { createGunzip, gzipSync } from 'node:zlib';
import fastify4 from 'fastify4';
import fastify5, { type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify5';
import { toFastify } from '../../src/adapters/fastify.ts';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouter } from '../../src/router/router.ts';
import type { Model } from '../../src/models/model.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { streamChat } from '../helpers/http.ts';
import { listen } from '../helpers/listen.ts';
import { settledHeap } from '../helpers/fuzz-heap.ts';
import { BODY_LIMIT, checkRegistryRoutes, checkServedOpenAPI, checkSingleRoutes, makeRegistryRouter, makeSingleRouter, post, postChunked, assertError } from './adapters-shared.ts';
import { noTurnId, TURN_ID } from '../helpers/turns.ts';
import { withoutIds } from '../helpers/sse.ts';

// The two majors' types differ in details the tests do not touch; the bodies
// are written once against Fastify 5's types, and the first test below
// type-checks a user's registration against each major's own types.
type App = FastifyInstance;
type AppOptions = { exposeHeadRoutes?: boolean; forceCloseConnections?: boolean | 'idle' };
const majors: Array<[string, (options?: AppOptions) => App]> = [
  // forceCloseConnections: close() drops fetch's keep-alive sockets instead of waiting them out.
  ['fastify4', (options) => fastify4({ forceCloseConnections: true, ...options }) as unknown as App],
  ['fastify5', (options) => fastify5({ forceCloseConnections: true, ...options })],
];

/** Listens on 127.0.0.1, port 0, closed after the test. */
async function start(t: TestContext, app: App): Promise<string> {
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  t.after(() => app.close());
  return url;
}

/** The host's own routes, beside and under the plugin's prefix. */
/** @fastify/compress's request decompression, as it writes it: the inflating stream is handed on paused. */
function inflatedAsFastifyCompressDoes(payload: Readable): Readable {
  const gunzip = createGunzip();
  gunzip.pause();
  pipeline(payload, gunzip, () => {});
  return gunzip;
}

function hostRoutes(app: App): void {
  app.get('/health', async () => 'ok');
  app.get('/api/host/info', async () => ({ host: 'info' }));
  app.post('/api/host/echo', async (request) => ({ echoed: request.body }));
  for (const base of ['/api', '/api/v1']) app.get(`${base}/status`, async () => 'up');
}

test('the plugin type-checks and runs with each major\'s own types', async (t) => {
  const router = makeSingleRouter();
  const app4 = fastify4({ forceCloseConnections: true });
  await app4.register(toFastify(router), { prefix: '/bot' });
  const app5 = fastify5({ forceCloseConnections: true });
  await app5.register(toFastify(router), { prefix: '/bot' });
  for (const app of [app4, app5]) {
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    t.after(() => app.close());
    assert.deepEqual(noTurnId(await (await post(`${url}/bot/chat`, { message: 'typed' })).json()), { agent_id: 'bot', response: 'typed' });
  }
});

for (const [name, fastify] of majors) {
  test(`${name}: plugin prefix /api, the router reading every body`, async (t) => {
    const fixture = makeRegistryRouter();
    const app = fastify();
    hostRoutes(app);
    await app.register(toFastify(fixture.router), { prefix: '/api' });
    const url = await start(t, app);
    await checkRegistryRoutes(t, { origin: url, base: '/api', fixture });
  });

  test(`${name}: a body Fastify's own parser would take differently is answered exactly as on node:http`, async (t) => {
    const app = fastify();
    await app.register(toFastify(makeRegistryRouter().router), { prefix: '/api' });
    const mounted = await start(t, app);
    const plain = await listen(makeRegistryRouter().router.toRequestListener());
    t.after(() => plain.close());
    const json = 'application/json';
    const cases: Array<[string, Record<string, string>, string | Uint8Array<ArrayBuffer>]> = [
      ['Latin-1 bytes', { 'content-type': json }, Uint8Array.from(Buffer.from('{"message":"caf\xe9"}', 'latin1'))],
      ['a charset other than UTF-8', { 'content-type': `${json}; charset=latin1` }, '{"message":"hi"}'],
      ['a Content-Encoding on a plain body', { 'content-type': json, 'content-encoding': 'gzip' }, '{"message":"hi"}'],
      ['a gzipped body', { 'content-type': json, 'content-encoding': 'gzip' }, Uint8Array.from(gzipSync('{"message":"hi"}'))],
      ['a JSON string', { 'content-type': json }, '"hi"'],
      ['a declared non-JSON type over the limit', { 'content-type': 'text/plain' }, 'x'.repeat(BODY_LIMIT * 2)],
      ['a __proto__ key (dropped)', { 'content-type': json }, '{"message":"hi","__proto__":{"polluted":1}}'],
      ['an empty body', { 'content-type': json }, ''],
      // A typed array, not a string: fetch would declare a string text/plain.
      ['no Content-Type', {}, Uint8Array.from(Buffer.from('{"message":"hi"}'))],
      ['a Content-Type that does not parse', { 'content-type': 'nonsense' }, '{}'],
    ];
    for (const [what, headers, body] of cases) {
      const answers = await Promise.all([`${mounted}/api`, plain.url].map(async (base) => {
        const res = await fetch(`${base}/counter-1/chat`, { method: 'POST', headers, body });
        // Each turn has a random id of its own: the same bytes but for it, which must be well formed on both.
        const turn = res.headers.get('turn-id');
        const text = await res.text();
        if (turn === null) return { status: res.status, type: res.headers.get('content-type'), turn, body: text };
        assert.match(turn, TURN_ID, what);
        return { status: res.status, type: res.headers.get('content-type'), turn: 'a turn id', body: text.replaceAll(turn, '<turn_id>') };
      }));
      assert.deepEqual(answers[0], answers[1], what);
    }
  });

  test(`${name}: a host preParsing hook that hands on a stream of its own has the last word on the body`, async (t) => {
    const app = fastify();
    // What hosts do there: pass the bytes through, keep them (a signature check), or decompress them.
    app.addHook('preParsing', async (request, _reply, payload) => {
      const how = request.headers['x-hook'];
      if (how === 'pass') return payload.pipe(new PassThrough());
      if (how === 'keep') {
        const kept: Buffer[] = [];
        for await (const chunk of payload) kept.push(chunk as Buffer);
        return Readable.from([Buffer.concat(kept)]);
      }
      if (how === 'gunzip') return payload.pipe(createGunzip());
      return payload;
    });
    await app.register(toFastify(makeRegistryRouter().router), { prefix: '/api' });
    const url = await start(t, app);
    const chat = (hook: string, body: string | Uint8Array<ArrayBuffer>, headers: Record<string, string> = {}) =>
      fetch(`${url}/api/counter-1/chat`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-hook': hook, ...headers }, body });
    for (const hook of ['pass', 'keep']) {
      assert.deepEqual(noTurnId(await (await chat(hook, '{"message":"through the hook"}')).json()), { agent_id: 'counter-1', response: 'through the hook' }, hook);
      await assertError(await chat(hook, '{"message":'), 400, 'invalid_json');
      await assertError(await chat(hook, Uint8Array.from(Buffer.from('{"message":"caf\xe9"}', 'latin1'))), 400, 'invalid_json');
      await assertError(await chat(hook, '{"nothing":1}'), 400, 'missing_message');
    }
    const gzipped = Uint8Array.from(gzipSync('{"message":"unzipped by the host"}'));
    assert.deepEqual(noTurnId(await (await chat('gunzip', gzipped, { 'content-encoding': 'gzip' })).json()), { agent_id: 'counter-1', response: 'unzipped by the host' });
    // Over the router's limit, with no length declared: refused once the limit is passed.
    const res = await postChunked(`${url}/api/counter-1/chat`, `{"message":"${'x'.repeat(BODY_LIMIT * 4)}"}`, { 'content-type': 'application/json', 'x-hook': 'pass' });
    // The hook's stream stopped at the limit, the rest unread: the connection closes, or it would stall on it.
    assert.equal(res.headers.get('connection'), 'close');
    await assertError(res, 413, 'body_too_large');
  });

  test(`${name}: a host preParsing hook that hands on a paused stream (as @fastify/compress inflates a gzipped body) is read, not left hanging`, async (t) => {
    const app = fastify();
    app.addHook('preParsing', async (request, _reply, payload) => {
      if (request.headers['content-encoding'] !== 'gzip') return payload;
      return inflatedAsFastifyCompressDoes(payload);
    });
    await app.register(toFastify(makeRegistryRouter().router), { prefix: '/api' });
    const url = await start(t, app);
    const res = await fetch(`${url}/api/counter-1/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
      body: Uint8Array.from(gzipSync('{"message":"inflated"}')),
      // Without an answer the request waited for good: fail the test instead of hanging it.
      signal: AbortSignal.timeout(10_000),
    });
    assert.deepEqual(noTurnId(await res.json()), { agent_id: 'counter-1', response: 'inflated' });
  });

  test(`${name}: a body a host preParsing hook's stream gives is limited by its bytes, and a refusal that leaves the upload unread closes the connection`, async (t) => {
    const app = fastify();
    app.addHook('preParsing', async (request, _reply, payload) => {
      if (request.headers['content-encoding'] !== 'gzip') return payload.pipe(new PassThrough());
      return inflatedAsFastifyCompressDoes(payload);
    });
    await app.register(toFastify(makeRegistryRouter().router), { prefix: '/api' });
    const url = await start(t, app);
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    t.after(() => agent.destroy());
    const send = (method: string, path: string, headers: Record<string, string | number> = {}, body?: Buffer): Promise<{ status?: number | undefined; connection?: string | undefined; text: string }> =>
      new Promise((resolve, reject) => {
        const req = http.request(`${url}${path}`, { method, agent, headers }, (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => (text += chunk));
          res.on('end', () => resolve({ status: res.statusCode, connection: res.headers.connection, text }));
        });
        // Without an answer the request waited for good: fail the test instead of hanging it.
        req.setTimeout(10_000, () => req.destroy(new Error(`no answer to ${method} ${path}`)));
        req.on('error', reject);
        req.end(body);
      });
    const expectError = (reply: { status?: number | undefined; text: string }, status: number, code: string): void => {
      assert.equal(reply.status, status, reply.text);
      assert.equal((JSON.parse(reply.text) as { code?: string }).code, code);
    };
    // A gzipped body whose compressed length alone is over the limit: it was 415 "send the body uncompressed".
    const noise = Array.from({ length: BODY_LIMIT }, () => Math.random().toString(36).slice(2)).join('');
    const gzipped = gzipSync(JSON.stringify({ message: noise }));
    assert.ok(gzipped.length > BODY_LIMIT);
    const big = { 'content-type': 'application/json', 'content-encoding': 'gzip', 'content-length': gzipped.length };
    const inflated = await send('POST', '/api/counter-1/chat', big, gzipped);
    expectError(inflated, 413, 'body_too_large');
    assert.equal(inflated.connection, 'close', 'the rest of the upload is still on the connection');
    // Refusals whose upload the hook's stream read only up to the limit: the connection was kept, and the next request on it was never answered.
    const upload = Buffer.from(JSON.stringify({ message: 'x'.repeat(512 * 1024) }));
    for (const [type, status, code] of [['text/plain', 415, 'unsupported_media_type'], ['application/json', 413, 'body_too_large']] as const) {
      const refused = await send('POST', '/api/counter-1/chat', { 'content-type': type, 'content-length': upload.length }, upload);
      expectError(refused, status, code);
      assert.equal(refused.connection, 'close', type);
      const next = await send('GET', '/api/counter-1/state');
      assert.deepEqual(JSON.parse(next.text), { agent_id: 'counter-1', state: { count: 0 } });
    }
  });

  test(`${name}: a host preParsing hook that reads the request alongside and hands it on as it is (fastify-raw-body) leaves the router its bytes`, async (t) => {
    const app = fastify();
    const kept: string[] = [];
    // fastify-raw-body's hook, as it works: the raw bytes kept aside for a signature check, read as they
    // come, and the request itself handed on. Its chunks were gone by the time the router read.
    app.addHook('preParsing', (request, _reply, payload, done) => {
      const chunks: Buffer[] = [];
      payload.on('data', (chunk: Buffer) => chunks.push(chunk));
      payload.on('end', () => kept.push(Buffer.concat(chunks).toString()));
      done(null, payload);
    });
    await app.register(toFastify(makeRegistryRouter().router), { prefix: '/api' });
    const url = await start(t, app);
    assert.deepEqual(noTurnId(await (await post(`${url}/api/counter-1/chat`, { message: 'read twice' })).json()), { agent_id: 'counter-1', response: 'read twice' });
    assert.deepEqual(kept, ['{"message":"read twice"}'], 'the hook has its copy too');
    await assertError(await post(`${url}/api/counter-1/chat`, '{"message":'), 400, 'invalid_json');
    await assertError(await post(`${url}/api/counter-1/chat`, { message: 'x'.repeat(BODY_LIMIT * 2) }), 413, 'body_too_large');
    // Refused on its headers, as on node:http.
    const gzipped = await fetch(`${url}/api/counter-1/chat`, { method: 'POST', headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' }, body: Uint8Array.from(gzipSync('{"message":"hi"}')) });
    await assertError(gzipped, 415, 'unsupported_media_type');
    await assertError(await post(`${url}/api/counter-1/chat`, 'message=hi', { 'content-type': 'text/plain' }), 415, 'unsupported_media_type');

    // A hook that waits until the body came before handing the request on: what is left is the body's tail,
    // which was parsed as the body (400, the client blamed); now refused as a setup mistake, told to the operator.
    const logged: unknown[] = [];
    const late = fastify();
    late.addHook('preParsing', async (_request, _reply, payload) => {
      const arrived = new Promise((resolve) => payload.once('data', resolve));
      payload.on('data', () => {});
      await arrived;
      return payload;
    });
    await late.register(toFastify(makeRegistryRouter({ logger: { error: (_message, error) => logged.push(error) } }).router), { prefix: '/api' });
    const lateUrl = await start(t, late);
    const res = await fetch(`${lateUrl}/api/counter-1/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ message: 'gone' }),
      // Should a read wait for an end that went by already: fail the test instead of hanging it.
      signal: AbortSignal.timeout(10_000),
    });
    await assertError(res, 500, 'internal_error');
    assert.equal((logged[0] as { code?: string }).code, 'body_already_read');
  });

  test(`${name}: a host's JSON parser is not used on the router's routes (the router reads), prefixes /api and /v1 nested`, async (t) => {
    const fixture = makeRegistryRouter({ openapi: true });
    const app = fastify();
    hostRoutes(app);
    await app.register(
      async (scope) => {
        scope.removeContentTypeParser('application/json');
        await scope.register(toFastify(fixture.router), { prefix: '/v1' });
      },
      { prefix: '/api' },
    );
    const url = await start(t, app);
    await checkRegistryRoutes(t, { origin: url, base: '/api/v1', fixture });
    await checkServedOpenAPI(t, `${url}/api/v1/openapi.json`, '/{agent_id}/chat', '/api/v1');
  });

  test(`${name}: a host JSON parser that keeps the raw bytes (parseAs: 'buffer') leaves the router's bodies alone`, async (t) => {
    const fixture = makeRegistryRouter();
    const app = fastify();
    app.removeContentTypeParser('application/json');
    app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));
    await app.register(toFastify(fixture.router), { prefix: '/api' });
    const url = await start(t, app);
    assert.deepEqual(noTurnId(await (await post(`${url}/api/counter-1/chat`, { message: 'bytes' })).json()), { agent_id: 'counter-1', response: 'bytes' });
    await assertError(await post(`${url}/api/counter-1/chat`, '{"message":'), 400, 'invalid_json');
  });

  test(`${name}: a single-agent router, at a plugin prefix and at the root`, async (t) => {
    const app = fastify();
    await app.register(toFastify(makeSingleRouter()), { prefix: '/bot' });
    await app.register(toFastify(makeSingleRouter({ prefix: '/other' })));
    await app.register(async (scope) => scope.register(toFastify(makeSingleRouter())), { prefix: '/root-of-scope' });
    const url = await start(t, app);
    await checkSingleRoutes(t, url, '/bot');
    await checkSingleRoutes(t, url, '/other');
    await checkSingleRoutes(t, url, '/root-of-scope');
  });

  test(`${name}: the host's hooks, error handler and not-found handler keep working`, async (t) => {
    const fixture = makeRegistryRouter();
    const app = fastify();
    app.addHook('onRequest', async (request, reply) => {
      reply.header('x-host-hook', 'ran');
      if (request.headers['x-deny'] !== undefined) throw Object.assign(new Error('denied by the host'), { statusCode: 401 });
    });
    app.setErrorHandler(async (error, _request, reply) => reply.code(401).send({ host: (error as Error).message }));
    app.setNotFoundHandler(async (_request, reply) => reply.code(404).send({ host: 'not found' }));
    await app.register(toFastify(fixture.router), { prefix: '/api' });
    const url = await start(t, app);

    await t.test('headers a hook set through Fastify survive the hijack', async () => {
      const res = await post(`${url}/api/counter-1/chat`, { message: 'hi' });
      assert.equal(res.headers.get('x-host-hook'), 'ran');
      assert.deepEqual(noTurnId(await res.json()), { agent_id: 'counter-1', response: 'hi' });
    });
    await t.test('an error that is not a body refusal goes to the host\'s error handler', async () => {
      const res = await post(`${url}/api/counter-1/chat`, { message: 'hi' }, { 'content-type': 'application/json', 'x-deny': '1' });
      assert.equal(res.status, 401);
      assert.deepEqual(await res.json(), { host: 'denied by the host' });
    });
    await t.test('a path under the prefix that is not the router\'s gets the host\'s not-found handler', async () => {
      const res = await fetch(`${url}/api/a/b/c`);
      assert.equal(res.status, 404);
      assert.deepEqual(await res.json(), { host: 'not found' });
    });
    await t.test('a malformed Content-Type is 415 in the router\'s shape', async () => {
      await assertError(await post(`${url}/api/counter-1/chat`, '{}', { 'content-type': 'nonsense' }), 415, 'unsupported_media_type');
    });
    await t.test('a body refusal keeps the host\'s onRequest headers', async () => {
      const res = await post(`${url}/api/counter-1/chat`, '{"message":');
      assert.equal(res.headers.get('x-host-hook'), 'ran');
      await assertError(res, 400, 'invalid_json');
    });
  });

  test(`${name}: with the router's cors option, preflights reach the router`, async (t) => {
    const fixture = makeRegistryRouter({ cors: { origins: ['https://app.example'] } });
    const app = fastify();
    await app.register(toFastify(fixture.router), { prefix: '/api' });
    const url = await start(t, app);
    const res = await fetch(`${url}/api/counter-1/chat`, {
      method: 'OPTIONS',
      headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' },
    });
    assert.equal(res.status, 204);
    assert.equal(res.headers.get('access-control-allow-origin'), 'https://app.example');
    // The router's own body refusal carries them too.
    const refused = await post(`${url}/api/counter-1/chat`, '{"message":', { 'content-type': 'application/json', origin: 'https://app.example' });
    assert.equal(refused.headers.get('access-control-allow-origin'), 'https://app.example');
    assert.equal(refused.headers.get('vary'), 'Origin');
    await assertError(refused, 400, 'invalid_json');
  });
}

/** The README's `frameworkErrors`: Fastify's refusal of a path it cannot percent-decode, in the router's shape. */
function frameworkErrors(error: FastifyError, _request: FastifyRequest, reply: FastifyReply): void {
  if (error.code !== 'FST_ERR_BAD_URL') {
    reply.send(error);
    return;
  }
  reply.code(400).send({ error: 'Agent id is not valid percent-encoding', code: 'bad_agent_id' });
}

for (const [name, fastify] of majors) {
  test(`${name}: a plugin prefix with a parameter or a trailing slash: the router gets the path after it, whatever the parameter's length`, async (t) => {
    const fixture = makeRegistryRouter();
    const app = fastify();
    await app.register(toFastify(fixture.router), { prefix: '/t/:tenant' });
    await app.register(toFastify(makeRegistryRouter().router), { prefix: '/api/' });
    const url = await start(t, app);
    for (const tenant of ['acme', 'a', 'averyverylongtenant']) {
      // The prefix pattern is 10 characters: cut there, /t/acme/counter-1/chat was read as the generic route of agent "chat".
      assert.deepEqual(noTurnId(await (await post(`${url}/t/${tenant}/counter-1/chat`, { message: 'hi' })).json()), { agent_id: 'counter-1', response: 'hi' }, tenant);
      const state = await fetch(`${url}/t/${tenant}/counter-1/state`);
      assert.deepEqual(await state.json(), { agent_id: 'counter-1', state: { count: 0 } }, tenant);
    }
    const invoked = await post(`${url}/t/acme/counter-2/invoke?x=/a/b`, { method: 'increment' });
    assert.deepEqual(noTurnId(await invoked.json()), { agent_id: 'counter-2', result: 1 }, 'a query holding slashes is not a segment');
    const slash = await fetch(`${url}/api/counter-1/state`);
    assert.deepEqual(await slash.json(), { agent_id: 'counter-1', state: { count: 0 } });
  });

  test(`${name}: fastify.close() lets running streams finish for shutdownTimeout, then ends them with shutting_down`, async (t) => {
    const fixture = makeRegistryRouter();
    // Fastify's default: close() waits for connections in use, such as the stream's.
    const app = fastify({ forceCloseConnections: 'idle' });
    await app.register(toFastify(fixture.router, { shutdownTimeout: 0.3 }));
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    t.after(() => app.close());
    const res = await streamChat(`${url}/waiter-1/chat`, 'hold');
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    assert.match((await reader.read()).value ?? '', /data: started/);
    const closedAt = Date.now();
    const closing = app.close();
    let rest = '';
    for (let step = await reader.read(); !step.done; step = await reader.read()) rest += step.value;
    assert.ok(Date.now() - closedAt >= 250, 'not aborted before shutdownTimeout');
    assert.match(withoutIds(rest), /event: error\ndata: \{"error":"Server is shutting down","code":"shutting_down"\}/);
    assert.equal(((await fixture.aborted) as { code?: string }).code, 'shutting_down', "the model's signal was aborted");
    await closing;
  });

  test(`${name}: a JSON reply still running when fastify.close() begins says Connection: close, so a keep-alive client does not reuse the socket`, async (t) => {
    const fixture = makeRegistryRouter();
    const app = fastify({ forceCloseConnections: 'idle' });
    await app.register(toFastify(fixture.router, { shutdownTimeout: 0.2 }));
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    t.after(() => app.close());
    const agent = new http.Agent({ keepAlive: true });
    t.after(() => agent.destroy());
    const reply = new Promise<http.IncomingMessage>((resolve, reject) => {
      const req = http.request(`${url}/waiter-1/chat`, { method: 'POST', agent, headers: { 'content-type': 'application/json' } }, resolve);
      req.on('error', reject);
      req.end(JSON.stringify({ message: 'hold' }));
    });
    await fixture.started;
    const closing = app.close();
    const res = await reply;
    res.resume();
    assert.equal(res.statusCode, 503);
    assert.equal(res.headers.connection, 'close');
    await closing;
  });

  test(`${name}: fastify.close() cuts a stream whose client stopped reading once the aborted streams had their grace, instead of waiting for turnTimeout`, async (t) => {
    // A model that writes faster than the client reads: the socket's buffers fill, and the stream waits for drain.
    const big = 'x'.repeat(64 * 1024);
    const firehose: Model = {
      name: 'firehose',
      async *stream({ signal }) {
        while (!signal.aborted) yield big;
      },
    };
    class Firehose extends Agent {
      constructor(id: string) {
        super(id, { model: firehose, storage: new MemoryStorage() });
      }
    }
    const registry = new AgentRegistry();
    registry.register('hose-[0-9]+', Firehose);
    const router = new AgentRouter(registry, { pingInterval: 0 });
    const app = fastify({ forceCloseConnections: 'idle' });
    await app.register(toFastify(router, { shutdownTimeout: 0.2 }));
    const url = new URL(await app.listen({ port: 0, host: '127.0.0.1' }));
    t.after(() => app.close());
    // A client that sends its request and never reads a byte of the answer.
    const socket = net.connect(Number(url.port), '127.0.0.1');
    t.after(() => socket.destroy());
    socket.on('error', () => {});
    socket.pause();
    const body = JSON.stringify({ message: 'go' });
    socket.write(`POST /hose-1/chat?stream=true HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    while (router.openStreams === 0) await new Promise((resolve) => setTimeout(resolve, 20));
    await new Promise((resolve) => setTimeout(resolve, 200));
    const closedAt = Date.now();
    const closed = await Promise.race([app.close().then(() => true), new Promise((resolve) => setTimeout(resolve, 4000, false))]);
    if (!closed) socket.destroy(); // so that close() can end after the failure
    assert.equal(closed, true, 'close() still waiting 4 s later (for the stall timeout, 300 s)');
    assert.ok(Date.now() - closedAt >= 1000, 'cut only after the abort grace (1 s past shutdownTimeout)');
    assert.equal(router.openStreams, 0);
  });

  test(`${name}: over HTTP/2, a request whose client cancelled its stream while a host hook ran is not kept for good`, async (t) => {
    let reached!: () => void;
    const reaching = new Promise<void>((resolve) => (reached = resolve));
    // Asked once the plugin's handler has given the request to the router.
    const router = makeRegistryRouter({ authorize: () => (reached(), true) }).router;
    // The majors' http2 overloads type the app apart; the test touches only what both share.
    const http2App = (name === 'fastify4' ? fastify4 : fastify5) as unknown as (options: { http2: true }) => App;
    const app = http2App({ http2: true });
    let raw: WeakRef<object> | undefined;
    let arrived!: () => void;
    const arriving = new Promise<void>((resolve) => (arrived = resolve));
    app.addHook('onRequest', async (request) => {
      raw = new WeakRef(request.raw);
      const stream = (request.raw as unknown as { stream: http2.ServerHttp2Stream }).stream;
      arrived();
      // The plugin's handler runs once the client has cancelled: its response closed before the router saw it.
      await new Promise((resolve) => stream.once('close', resolve));
    });
    await app.register(toFastify(router), { prefix: '/api' });
    const url = await start(t, app);
    const client = http2.connect(url);
    t.after(() => client.destroy());
    const stream = client.request({ ':method': 'GET', ':path': '/api/counter-1/state' }, { endStream: true });
    stream.on('error', () => {});
    await arriving;
    stream.close(http2.constants.NGHTTP2_CANCEL);
    await new Promise((resolve) => stream.once('close', resolve));
    await reaching;
    await settledHeap();
    assert.equal(raw?.deref(), undefined, 'the cancelled request (and its response) is still held after a full collection');
    // Before app.close(), which otherwise waits out Fastify's http2SessionTimeout (72 s) for this session.
    client.destroy();
  });

  test(`${name}: with exposeHeadRoutes: false, HEAD is still answered wherever GET is`, async (t) => {
    const host = fastify({ exposeHeadRoutes: false });
    await host.register(toFastify(makeRegistryRouter().router), { prefix: '/api' });
    const url = await start(t, host);
    const head = await fetch(`${url}/api/counter-1/state`, { method: 'HEAD' });
    assert.equal(head.status, 200);
    assert.match(head.headers.get('content-type') ?? '', /^application\/json/);
    assert.equal(await head.text(), '');
  });
}

test('a router without a body limit (Infinity) takes a body over Fastify\'s own default limit (1 MiB)', async (t) => {
  for (const [name, make] of majors) {
    const app = make();
    await app.register(toFastify(makeRegistryRouter({ bodyLimit: Infinity }).router), { prefix: '/api' });
    const url = await start(t, app);
    const reply = await post(`${url}/api/counter-1/chat`, { message: 'x'.repeat(2 * 1024 * 1024) });
    assert.equal(reply.status, 200, name);
  }
});

test('with ignoreDuplicateSlashes, a path Fastify routes to the plugin despite doubled slashes is served', async (t) => {
  const apps: Array<[string, App]> = [
    ['fastify4', fastify4({ forceCloseConnections: true, ignoreDuplicateSlashes: true }) as unknown as App],
    ['fastify5', fastify5({ forceCloseConnections: true, routerOptions: { ignoreDuplicateSlashes: true } })],
  ];
  for (const [name, app] of apps) {
    await app.register(toFastify(makeRegistryRouter().router), { prefix: '/api' });
    const url = await start(t, app);
    for (const path of ['//api//counter-7/state', '/api//counter-7//state?x=//']) {
      const res = await fetch(`${url}${path}`);
      assert.equal(res.status, 200, `${name} ${path}`);
      assert.deepEqual(await res.json(), { agent_id: 'counter-7', state: { count: 0 } });
    }
  }
});

test('a path Fastify cannot percent-decode is refused by Fastify before any route; frameworkErrors answers it in the router\'s shape', async (t) => {
  // Written against Fastify 5's types, as the rest of this file; the options are the same in 4.
  const creates = [fastify4 as unknown as typeof fastify5, fastify5];
  for (const create of creates) {
    const plain = create({ forceCloseConnections: true });
    await plain.register(toFastify(makeRegistryRouter().router), { prefix: '/api' });
    const plainUrl = await plain.listen({ port: 0, host: '127.0.0.1' });
    t.after(() => plain.close());
    const refused = await fetch(`${plainUrl}/api/a%zz/state`);
    assert.equal(refused.status, 400);
    assert.equal(((await refused.json()) as { code?: string }).code, 'FST_ERR_BAD_URL', 'the plugin never sees it: Fastify answers in its own shape');

    const mapped = create({ forceCloseConnections: true, frameworkErrors });
    await mapped.register(toFastify(makeRegistryRouter().router), { prefix: '/api' });
    const mappedUrl = await mapped.listen({ port: 0, host: '127.0.0.1' });
    t.after(() => mapped.close());
    await assertError(await fetch(`${mappedUrl}/api/a%zz/state`), 400, 'bad_agent_id');
    // Paths Fastify can decode are unaffected.
    assert.deepEqual(noTurnId(await (await post(`${mappedUrl}/api/counter-1/chat`, { message: 'hi' })).json()), { agent_id: 'counter-1', response: 'hi' });
  }
});
