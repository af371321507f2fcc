// toExpress against the real Express 4 and 5 (npm aliases express4, express5).
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { test } from 'node:test';
import compression from 'compression';
import express4 from 'express4';
import express5 from 'express5';
import { toExpress } from '../../src/adapters/express.ts';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { AgentRouterError } from '../../src/errors.ts';
import { scriptedModel } from '../../src/models/scripted.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { deferred } from '../helpers/http.ts';
import { listen } from '../helpers/listen.ts';
import { assertError, BODY_LIMIT, checkRegistryRoutes, checkServedOpenAPI, checkSingleRoutes, makeRegistryRouter, makeSingleRouter, post, postChunked } from './adapters-shared.ts';
import { noTurnId } from '../helpers/turns.ts';
import { withoutIds } from '../helpers/sse.ts';

/** A registry whose agents reply 'first', then ' last' once `release` settles: a stream held open between them. */
function firstThenLast(release: Promise<unknown>): AgentRegistry {
  const registry = new AgentRegistry();
  registry.register('.*', class extends Agent {
    constructor(id: string) {
      super(id, {
        model: scriptedModel(async function* () {
          yield 'first';
          await release;
          yield ' last';
        }),
      });
    }
  });
  return registry;
}

/**
 * The README's recipe for a host that must run `express.json()` before the
 * router: body-parser's refusals, which go to Express's error handlers and
 * never reach the router, answered in the router's `{"error", "code"}` shape.
 */
const BODY_PARSER_CODES: Record<string, string> = {
  'entity.parse.failed': 'invalid_json',
  'entity.too.large': 'body_too_large',
  'charset.unsupported': 'unsupported_media_type',
  'encoding.unsupported': 'unsupported_media_type',
};
function bodyParserErrors(err: any, _req: any, res: any, next: (err?: unknown) => void): void {
  const code = BODY_PARSER_CODES[err?.type];
  if (code === undefined || res.headersSent) return next(err);
  res.status(err.status).json({ error: code === 'invalid_json' ? 'Invalid JSON body' : err.message, code });
}

/** The host's own routes, beside and under the router's mount path. */
function hostRoutes(app: any): void {
  app.get('/health', (_req: any, res: any) => res.send('ok'));
  app.get('/api/host/info', (_req: any, res: any) => res.json({ host: 'info' }));
  app.post('/api/host/echo', (req: any, res: any) => res.json({ echoed: req.body }));
  for (const base of ['/api', '/api/v1']) app.get(`${base}/status`, (_req: any, res: any) => res.send('up'));
}

for (const [name, express] of [['express4', express4], ['express5', express5]] as const) {
  test(`${name}: express.json() before the router, mounted at /api`, async (t) => {
    const fixture = makeRegistryRouter();
    const app = express();
    app.use(express.json());
    app.use('/api', toExpress(fixture.router));
    hostRoutes(app);
    app.use(bodyParserErrors);
    const { url, close } = await listen(app);
    t.after(close);
    await checkRegistryRoutes(t, { origin: url, base: '/api', fixture, hostParser: true });
    await t.test('req.originalUrl is kept, req.url made relative by Express', () => {
      assert.ok(fixture.originalUrls.includes('/api/counter-1/chat'), fixture.originalUrls.join(' '));
    });
  });

  test(`${name}: express.json() first, a body bound for a host route under the router's mount path is left as the parser made it`, async (t) => {
    const fixture = makeRegistryRouter();
    const app = express();
    app.use(express.json());
    app.use('/api', toExpress(fixture.router));
    hostRoutes(app);
    const { url, close } = await listen(app);
    t.after(close);
    // Keys the router drops from its own bodies are the host's business on the host's routes.
    const body = { schema: { prototype: 'Shape', constructor: 'new Shape()' }, tags: { constructor: 1 } };
    assert.deepEqual(await (await post(`${url}/api/host/echo`, body)).json(), { echoed: body });
    // The router's own requests still have them dropped.
    const invoked = await post(`${url}/api/counter-9/invoke`, { method: 'echo', params: body });
    assert.deepEqual(noTurnId(await invoked.json()), { agent_id: 'counter-9', result: { schema: {}, tags: {} } });
  });

  test(`${name}: no body parser before the router, mount path /api plus the router's prefix /v1`, async (t) => {
    const fixture = makeRegistryRouter({ prefix: '/v1', openapi: true });
    const app = express();
    app.use('/api', toExpress(fixture.router));
    app.use(express.json()); // after the router: only the host's routes see it
    hostRoutes(app);
    const { url, close } = await listen(app);
    t.after(close);
    await checkRegistryRoutes(t, { origin: url, base: '/api/v1', fixture });
    await checkServedOpenAPI(t, `${url}/api/v1/openapi.json`, '/v1/{agent_id}/chat', '/api');
  });

  test(`${name}: a single-agent router at a mount path`, async (t) => {
    const app = express();
    app.use(express.json());
    app.use('/bot', toExpress(makeSingleRouter()));
    const { url, close } = await listen(app);
    t.after(close);
    await checkSingleRoutes(t, url, '/bot');
  });

  test(`${name}: express.json() first, a chunked body nested deeper than JSON.stringify can write is 400 json_too_deep, not a 500`, async (t) => {
    const fixture = makeRegistryRouter({ bodyLimit: 1024 * 1024 });
    const app = express();
    app.use(express.json({ limit: '1mb' }));
    app.use('/api', toExpress(fixture.router));
    const { url, close } = await listen(app);
    t.after(close);
    const deep = `{"message":${'['.repeat(20_000)}${']'.repeat(20_000)}}`;
    await assertError(await postChunked(`${url}/api/counter-1/chat`, deep), 400, 'json_too_deep');
  });

  test(`${name}: a host parser that leaves raw text (express.raw, express.text) or drains the body itself`, async (t) => {
    const logged: unknown[] = [];
    const { router } = makeRegistryRouter({ logger: { error: (_message, error) => logged.push(error) } });
    const app = express();
    app.use('/raw', express.raw({ type: 'application/json' }), toExpress(router));
    app.use('/text', express.text({ type: '*/*' }), toExpress(router));
    const drain = (req: any, _res: any, next: () => void): void => {
      req.resume();
      req.on('end', () => next());
    };
    app.use('/drained', drain, toExpress(router));
    const { url, close } = await listen(app);
    t.after(close);
    for (const base of ['/raw', '/text']) {
      assert.deepEqual(noTurnId(await (await post(`${url}${base}/counter-1/chat`, { message: `hi ${base}` })).json()), { agent_id: 'counter-1', response: `hi ${base}` });
      await assertError(await post(`${url}${base}/counter-1/chat`, '{"message":'), 400, 'invalid_json');
      // Chunked, so no declared length tells the limit is passed: the text itself is measured.
      const big = JSON.stringify({ message: 'x'.repeat(BODY_LIMIT * 2) });
      const chunked = await fetch(`${url}${base}/counter-1/chat`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: new Blob([big]).stream(),
        duplex: 'half',
      } as RequestInit);
      await assertError(chunked, 413, 'body_too_large');
    }
    // express.text({ type: '*/*' }) parses a body with no Content-Type too: refused all the same (strictContentType).
    const untyped = await fetch(`${url}/text/counter-1/chat`, { method: 'POST', body: new Blob(['{"message":"untyped"}']) });
    await assertError(untyped, 415, 'unsupported_media_type');
    await assertError(await post(`${url}/drained/counter-1/chat`, { message: 'lost' }), 500, 'internal_error');
    assert.equal((logged[0] as { code?: string }).code, 'body_already_read');
  });

  test(`${name}: a host middleware that set an encoding on the request (req.setEncoding) leaves the router bytes, not a crash`, async (t) => {
    const app = express();
    // As a raw-body logger might: the request's chunks come as strings from then on.
    app.use((req: http.IncomingMessage, _res: unknown, next: () => void) => {
      req.setEncoding('utf8');
      next();
    });
    app.use('/api', toExpress(makeRegistryRouter({ bodyLimit: 1024 * 1024 }).router));
    const { url, close } = await listen(app);
    t.after(close);
    // The router's reader threw on the string at the body's end: an uncaught exception, the process gone.
    assert.deepEqual(noTurnId(await (await post(`${url}/api/counter-1/chat`, { message: 'caf\u00e9 \u2615' })).json()), { agent_id: 'counter-1', response: 'caf\u00e9 \u2615' });
    // Many chunks, chunked: counted and joined as bytes.
    const long = 'x\u00e9'.repeat(100_000);
    assert.deepEqual(noTurnId(await (await postChunked(`${url}/api/counter-1/chat`, JSON.stringify({ message: long }))).json()), { agent_id: 'counter-1', response: long });
    await assertError(await post(`${url}/api/counter-1/chat`, '{"message":'), 400, 'invalid_json');
  });

  test(`${name}: a host middleware that reads the request alongside while the router awaits authorize: body_already_read, not the body's tail`, async (t) => {
    const logged: unknown[] = [];
    const { router } = makeRegistryRouter({ authorize: async () => true, logger: { error: (_message, error) => logged.push(error) } });
    const app = express();
    // A raw-body capture found in webhook guides: it reads the chunks as they come and calls next() at once.
    app.use((req: http.IncomingMessage, _res: unknown, next: () => void) => {
      req.on('data', () => {});
      next();
    });
    app.use('/api', toExpress(router));
    const { url, close } = await listen(app);
    t.after(close);
    // The router read after authorize, when the chunks were gone: it answered 400 missing_message, the client blamed.
    await assertError(await post(`${url}/api/counter-1/chat`, { message: 'lost' }), 500, 'internal_error');
    assert.equal((logged[0] as { code?: string }).code, 'body_already_read');
  });

  test(`${name}: behind compression(), a stream's events arrive as they are sent (gzipped, flushed per write), not all at the end`, async (t) => {
    const release = deferred();
    const registry = firstThenLast(release.promise);
    const app = express();
    app.use(compression());
    app.use('/api', toExpress(new AgentRouter(registry)));
    const { url, close } = await listen(app);
    t.after(close);
    t.after(() => release.resolve());
    const res = await fetch(`${url}/api/bot-1/chat?stream=true`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'accept-encoding': 'gzip' },
      body: JSON.stringify({ message: 'hi' }),
    });
    assert.equal(res.headers.get('content-encoding'), 'gzip', 'compressed, as compression() chose');
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let seen = '';
    // The model holds its last chunk until the first has reached the client: before, nothing came until the end.
    const timeout = setTimeout(() => void reader.cancel(new Error('the first event did not arrive')), 5000);
    while (!seen.includes('data: first\n\n')) {
      const { done, value } = await reader.read();
      assert.equal(done, false, `the stream ended before its first event arrived: ${JSON.stringify(seen)}`);
      seen += decoder.decode(value, { stream: true });
    }
    clearTimeout(timeout);
    release.resolve();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      seen += decoder.decode(value, { stream: true });
    }
    assert.equal(withoutIds(seen), 'data: first\n\ndata:  last\n\nevent: done\ndata: [DONE]\n\n');
  });

  test(`${name}: behind compression(), a stream read slowly leaves no 'drain' listener behind per wait for drain`, async (t) => {
    // Text gzip cannot shrink much, so the slow reader's backpressure reaches compression()'s gzip stream.
    const noise = (): string => Array.from({ length: 4096 }, () => Math.random().toString(36).slice(2, 10)).join(' ');
    const registry = new AgentRegistry();
    registry.register('.*', class extends Agent {
      constructor(id: string) {
        super(id, {
          model: scriptedModel(async function* () {
            for (let i = 0; i < 60; i++) yield noise();
          }),
        });
      }
    });
    const app = express();
    app.use(compression());
    // compression() hands res.on('drain', ...) to its gzip stream, and returns that stream: found here.
    let gzip: { listenerCount(event: string): number } | undefined;
    app.use((_req: any, res: any, next: () => void) => {
      const on = res.on;
      res.on = function (this: unknown, event: string, listener: (...args: unknown[]) => void) {
        const target = on.call(this, event, listener);
        if (event === 'drain' && target !== this) gzip = target;
        return target;
      };
      next();
    });
    app.use('/api', toExpress(new AgentRouter(registry, { pingInterval: 0 })));
    const { url, close } = await listen(app);
    t.after(close);
    const received = await new Promise<number>((resolve, reject) => {
      const req = http.request(`${url}/api/bot-1/chat?stream=true`, { method: 'POST', headers: { 'content-type': 'application/json', 'accept-encoding': 'gzip' } }, (res) => {
        let bytes = 0;
        res.on('data', (chunk: Buffer) => {
          bytes += chunk.length;
          res.pause();
          setTimeout(() => res.resume(), 1);
        });
        res.on('end', () => resolve(bytes));
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(JSON.stringify({ message: 'go' }));
    });
    assert.ok(received > 0);
    assert.ok(gzip !== undefined, 'the stream waited for drain through compression()');
    assert.ok(gzip.listenerCount('drain') <= 1, `${gzip.listenerCount('drain')} 'drain' listeners left on compression()'s gzip stream`);
  });

  test(`${name}: the README's shutdown recipe: a keep-alive connection busy at close() goes once its stream ends (a request it still brings is answered with Connection: close)`, async (t) => {
    const release = deferred();
    const registry = firstThenLast(release.promise);
    const router = new AgentRouter(registry);
    const app = express();
    app.use(toExpress(router));
    const server = app.listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    t.after(() => server.closeAllConnections());
    const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    t.after(() => agent.destroy());
    const chat = (path: string): Promise<{ status?: number | undefined; connection?: string | undefined; text?: string; error?: string }> => new Promise((resolve) => {
      const req = http.request(`${base}${path}`, { method: 'POST', agent, headers: { 'content-type': 'application/json' } }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve({ status: res.statusCode, connection: res.headers.connection, text }));
      });
      req.on('error', (error) => resolve({ error: (error as NodeJS.ErrnoException).code ?? error.message }));
      req.end(JSON.stringify({ message: 'hi' }));
    });
    const streaming = chat('/bot-1/chat?stream=true');
    while (router.openStreams === 0) await new Promise((resolve) => setTimeout(resolve, 10));
    // The recipe, as the README has it (its 10 s deadline is not reached here).
    const closed = new Promise<number>((resolve) => server.close(() => resolve(Date.now())));
    server.prependListener('request', (_req: http.IncomingMessage, res: http.ServerResponse) => {
      res.shouldKeepAlive = false;
    });
    const idle = setInterval(() => server.closeIdleConnections(), 100);
    idle.unref();
    t.after(() => clearInterval(idle));
    const deadline = setTimeout(() => {
      router.abortAll(new AgentRouterError(503, 'shutting_down', 'Server is shutting down', { expose: true }));
      setTimeout(() => server.closeAllConnections(), 1000).unref();
    }, 10_000);
    deadline.unref();
    t.after(() => clearTimeout(deadline));
    release.resolve();
    assert.match((await streaming).text ?? '', /event: done/);
    // The client reuses its kept-alive connection at once: answered, but with Connection: close (or refused).
    const next = await chat('/bot-2/chat');
    const endedAt = Date.now();
    assert.ok(next.error !== undefined || next.connection === 'close', `a request after close() was answered with Connection: ${next.connection}`);
    const closedAt = await Promise.race([closed, new Promise<number>((resolve) => setTimeout(resolve, 3000, Infinity))]);
    assert.ok(closedAt - endedAt < 1000, `close() called back ${closedAt - endedAt} ms after the last answer (Node's keepAliveTimeout is 5 s)`);
  });

  test(`${name}: a pipelined stream whose client left while a host middleware ran ends at once, not held for its stall timeout`, async (t) => {
    const big = 'b'.repeat(40 * 1024);
    const registry = new AgentRegistry();
    registry.register('.*', class extends Agent {
      constructor(id: string) {
        super(id, { model: scriptedModel(async function* ({ signal }) {
          for (let i = 0; i < 50 && !signal.aborted; i++) yield big;
        }) });
      }
    });
    const router = new AgentRouter(registry, { pingInterval: 0, logger: { error: () => {} } });
    const arrived = deferred();
    const app = express();
    app.get('/hang', () => {}); // the response ahead on the connection, never answered
    app.use(express.json());
    // A host middleware still at work (a session lookup) when the client goes: it calls next() after.
    app.use((req: http.IncomingMessage, _res: unknown, next: () => void) => {
      arrived.resolve();
      req.socket.once('close', () => next());
    });
    app.use(toExpress(router));
    const { port, close } = await listen(app);
    t.after(close);
    const body = JSON.stringify({ message: 'go' });
    const socket = net.connect(port, '127.0.0.1');
    socket.on('error', () => {});
    socket.write(`GET /hang HTTP/1.1\r\nHost: x\r\n\r\nPOST /queued-1/chat?stream=true HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    await arrived.promise;
    socket.destroy();
    const leftAt = Date.now();
    while ((router.pool?.size ?? 0) === 0 && Date.now() - leftAt < 3000) await new Promise((resolve) => setTimeout(resolve, 20));
    while (router.openStreams > 0 && Date.now() - leftAt < 3000) await new Promise((resolve) => setTimeout(resolve, 20));
    // Its response, queued behind /hang, had no 'close' to come: the stream waited for drain until turnTimeout (300 s).
    assert.equal(router.openStreams, 0, 'the stream is still open 3 s after its client left');
    // Node 24 marks the queued response destroyed when the socket closes, so there the turn is refused before it starts.
    assert.ok(router.pool?.list().every((agent) => !agent.busy), 'an agent is left busy');
  });

  test(`${name}: an error thrown out of the router goes to next(err)`, async (t) => {
    const router = new (class extends AgentRouter {
      override handle(): Promise<boolean> {
        return Promise.reject(new Error('boom'));
      }
    })(new AgentRegistry());
    const app = express();
    app.use(toExpress(router));
    app.use((err: Error, _req: any, res: any, _next: unknown) => res.status(500).json({ seen: err.message }));
    const { url, close } = await listen(app);
    t.after(close);
    const res = await post(`${url}/x/chat`, { message: 'hi' });
    assert.deepEqual(await res.json(), { seen: 'boom' });
  });
}
