import assert from 'node:assert/strict';
import { EventEmitter, getEventListeners, once } from 'node:events';
import { readFileSync } from 'node:fs';
import type http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import test, { type TestContext } from 'node:test';
import { AgentRouterError, UpstreamError } from '../../src/errors.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { HTTPTransport } from '../../src/transports/http.ts';
import { settledHeap } from '../helpers/fuzz-heap.ts';
import { listen } from '../helpers/listen.ts';
import { shortUndiciTimeouts, undiciFetch } from '../helpers/undici.ts';

/** One request as the fake remote saw it. */
interface Captured {
  method: string;
  /** The raw request target, exactly as it arrived on the wire. */
  url: string;
  headers: http.IncomingHttpHeaders;
  body: string;
  remotePort: number | undefined;
  /** Resolves when the response closes; `aborted` then tells whether the client went away first. */
  closed: Promise<void>;
  aborted: () => boolean;
}

type Handler = (req: http.IncomingMessage, res: http.ServerResponse, captured: Captured) => void | Promise<void>;

interface FakeRemote {
  /** The registry base to give HTTPTransport: `http://127.0.0.1:port/agent`. */
  base: string;
  origin: string;
  requests: Captured[];
  /** Resolves with the next request to arrive. */
  next: () => Promise<Captured>;
}

/**
 * A remote agent router reduced to the wire format of DESIGN.md sections 2
 * and 3, capturing every request. `handler` replaces the default behaviour.
 */
async function fakeRemote(t: TestContext, handler: Handler = defaultRemote): Promise<FakeRemote> {
  const requests: Captured[] = [];
  const arrivals = new EventEmitter();
  const { url, close } = await listen((req, res) => {
    void (async () => {
      let body = '';
      for await (const chunk of req) body += String(chunk);
      const closed = new Promise<void>((resolve) => res.once('close', () => resolve()));
      const captured: Captured = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body,
        remotePort: req.socket.remotePort,
        closed,
        aborted: () => !res.writableFinished,
      };
      requests.push(captured);
      arrivals.emit('request', captured);
      await handler(req, res, captured);
    })();
  });
  t.after(close);
  return {
    base: `${url}/agent`,
    origin: url,
    requests,
    next: async () => ((await once(arrivals, 'request')) as [Captured])[0],
  };
}

function json(res: http.ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' });
  res.end(JSON.stringify(body));
}

function sseHead(res: http.ServerResponse): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.flushHeaders();
}

/** `/agent/{segment}[/...]/{route}`: the id percent-decoded once, as a router would. */
function route(captured: Captured): { id: string; route: string; query: string } {
  const [path = '', query = ''] = captured.url.split('?');
  const parts = path.split('/');
  return { id: decodeURIComponent(parts[2] ?? ''), route: parts.at(-1) ?? '', query };
}

const defaultRemote: Handler = (_req, res, captured) => {
  const { id, route: name, query } = route(captured);
  const body = captured.body === '' ? {} : (JSON.parse(captured.body) as Record<string, unknown>);
  if (name === 'chat' && query.includes('stream=true')) {
    sseHead(res);
    for (const word of String(body['message']).split(' ')) res.write(`data: ${word}\n\n`);
    res.end('event: done\ndata: [DONE]\n\n');
  } else if (name === 'chat') json(res, 200, { agent_id: id, response: `echo: ${String(body['message'])}` });
  else if (name === 'invoke') json(res, 200, { agent_id: id, result: { method: body['method'], params: body['params'] ?? 'absent' } });
  else if (name === 'state') json(res, 200, { agent_id: id, state: { count: 1, id } });
  else json(res, 404, { error: 'No route', code: 'not_found' });
};

/** What a relayed error's message ends with: the remote agent server it came from. */
function from(remote: { base: string }): string {
  return ` (from the remote agent server at ${new URL(remote.base).origin})`;
}

async function collect(stream: AsyncIterable<string>): Promise<string[]> {
  const chunks: string[] = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

/** An UpstreamError (an AgentRouterError) with this status and code. */
function upstream(status: number, code: string, check?: (error: AgentRouterError) => void) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof UpstreamError, `expected an UpstreamError, got ${String(error)}`);
    assert.equal(error.status, status);
    assert.equal(error.code, code);
    assert.equal(error.expose, true);
    check?.(error);
    return true;
  };
}

test('chat posts {"message"} to {base}/{id}/chat and resolves with "response"', async (t) => {
  const remote = await fakeRemote(t);
  const transport = new HTTPTransport(remote.base);
  assert.equal(await transport.chat('bot-1', 'Hello there'), 'echo: Hello there');
  const [request] = remote.requests;
  assert.ok(request);
  assert.equal(request.method, 'POST');
  assert.equal(request.url, '/agent/bot-1/chat');
  assert.deepEqual(JSON.parse(request.body), { message: 'Hello there' });
  assert.equal(request.headers['content-type'], 'application/json');
  assert.equal(request.headers.accept, 'application/json');
});

test('invoke posts {"method","params"} to /invoke and resolves with "result"; params absent stay absent', async (t) => {
  const remote = await fakeRemote(t);
  const transport = new HTTPTransport(`${remote.base}/`); // a trailing slash changes nothing
  assert.deepEqual(await transport.invoke('counter-1', 'increment', { by: 2 }), { method: 'increment', params: { by: 2 } });
  assert.deepEqual(await transport.invoke('counter-1', 'reset'), { method: 'reset', params: 'absent' });
  assert.equal(remote.requests[0]?.url, '/agent/counter-1/invoke');
  assert.deepEqual(JSON.parse(remote.requests[0]?.body ?? ''), { method: 'increment', params: { by: 2 } });
  assert.deepEqual(JSON.parse(remote.requests[1]?.body ?? ''), { method: 'reset' });
});

test('invoke resolves with any JSON result, null included', async (t) => {
  const remote = await fakeRemote(t, (_req, res) => json(res, 200, { agent_id: 'x', result: null }));
  assert.equal(await new HTTPTransport(remote.base).invoke('x', 'noop', [1, 2]), null);
  assert.deepEqual(JSON.parse(remote.requests[0]?.body ?? ''), { method: 'noop', params: [1, 2] });
});

test('state GETs {base}/{id}/state without a body and resolves with "state"', async (t) => {
  const remote = await fakeRemote(t);
  assert.deepEqual(await new HTTPTransport(remote.base).state('counter-7'), { count: 1, id: 'counter-7' });
  const [request] = remote.requests;
  assert.equal(request?.method, 'GET');
  assert.equal(request?.url, '/agent/counter-7/state');
  assert.equal(request?.body, '');
  assert.equal(request?.headers['content-type'], undefined);
});

test('stream relays chunk by chunk: the first chunk arrives before the remote has finished', async (t) => {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let finished = false;
  const remote = await fakeRemote(t, async (_req, res) => {
    sseHead(res);
    res.write('data: Hello\n\n');
    await gate;
    res.write(': ping\n\n');
    res.write('data: line one\ndata: line two\n\n'); // one chunk holding a newline
    res.write('event: start\ndata: ignored\n\n'); // named events other than done/error are not chunks
    res.write('data:  world\n\n');
    res.end('event: done\ndata: [DONE]\n\n');
    finished = true;
  });
  const stream = new HTTPTransport(remote.base).stream('bot-1', 'hi');
  await stream.ready;
  const iterator = stream[Symbol.asyncIterator]();
  assert.deepEqual(await iterator.next(), { value: 'Hello', done: false });
  assert.equal(finished, false, 'the remote is still holding the rest of the reply');
  release();
  const rest: string[] = [];
  for (let step = await iterator.next(); step.done !== true; step = await iterator.next()) rest.push(step.value);
  assert.deepEqual(rest, ['line one\nline two', ' world']);
  assert.equal(finished, true);
  const [request] = remote.requests;
  assert.equal(request?.url, '/agent/bot-1/chat?stream=true');
  assert.equal(request?.headers.accept, 'text/event-stream');
  assert.deepEqual(JSON.parse(request?.body ?? ''), { message: 'hi' });
});

test('stream starts the request at once, before anyone iterates', async (t) => {
  const remote = await fakeRemote(t);
  const stream = new HTTPTransport(remote.base).stream('bot-1', 'eager start');
  const request = await remote.next();
  assert.equal(request.url, '/agent/bot-1/chat?stream=true');
  assert.deepEqual(await collect(stream), ['eager', 'start']);
});

test('ids with ?, #, %, /, spaces, dots and unicode reach the remote as exactly one encoded segment', async (t) => {
  const remote = await fakeRemote(t);
  const transport = new HTTPTransport(remote.base);
  const ids = ['a?b=1', 'a#frag', '100%', '%2e%2e', 'a/b', '../admin', '..%2Fadmin', 'a..b', '...', 'two words', 'héllo-日本-🚀', 'a\\b', "it's(1)*"];
  for (const id of ids) {
    assert.equal(await transport.chat(id, 'x'), 'echo: x');
    const request = remote.requests.at(-1) as Captured;
    assert.equal(request.url, `/agent/${encodeURIComponent(id)}/chat`, `id ${JSON.stringify(id)}`);
    assert.equal(request.url.split('/').length, 4, `id ${JSON.stringify(id)} stays one segment`);
    assert.equal(route(request).id, id);
  }
  await transport.state('a/b?c#d');
  assert.equal(remote.requests.at(-1)?.url, '/agent/a%2Fb%3Fc%23d/state');
  assert.deepEqual(await collect(transport.stream('x y/z', 'ok')), ['ok']);
  assert.equal(remote.requests.at(-1)?.url, '/agent/x%20y%2Fz/chat?stream=true');
});

test('ids that a URL parser would resolve as dot segments are refused with 400 before any request', async (t) => {
  const remote = await fakeRemote(t);
  const transport = new HTTPTransport(remote.base);
  const badId = (error: unknown): boolean => error instanceof AgentRouterError && error.status === 400 && error.code === 'bad_agent_id';
  for (const id of ['', '.', '..']) {
    await assert.rejects(transport.chat(id, 'x'), badId);
    await assert.rejects(transport.invoke(id, 'm'), badId);
    await assert.rejects(transport.state(id), badId);
    await assert.rejects(transport.stream(id, 'x').ready, badId);
  }
  await assert.rejects(transport.chat('\ud800', 'x'), badId); // a lone surrogate has no UTF-8 form
  assert.equal(remote.requests.length, 0);
});

test('a url holding {agent_id} gets the encoded id substituted, its query kept', async (t) => {
  const remote = await fakeRemote(t);
  const transport = new HTTPTransport(`${remote.origin}/bots/{agent_id}/api?v=2`);
  assert.equal(await transport.chat('a/b c', 'x'), 'echo: x');
  assert.equal(remote.requests.at(-1)?.url, '/bots/a%2Fb%20c/api/chat?v=2');
  await collect(transport.stream('s', 'y'));
  assert.equal(remote.requests.at(-1)?.url, '/bots/s/api/chat?v=2&stream=true');
});

test("the url's query reaches the remote as written, streams included (a key or signature in it is not re-encoded)", async (t) => {
  const remote = await fakeRemote(t);
  const query = 'key=Ab~1%20x&flag&sig=c%2Bd==';
  const transport = new HTTPTransport(`${remote.base}?${query}`);
  await transport.chat('bot-1', 'x');
  assert.equal(remote.requests.at(-1)?.url, `/agent/bot-1/chat?${query}`);
  assert.deepEqual(await collect(transport.stream('bot-1', 'y')), ['y']);
  // The stream flag is added, nothing else changed: it was "key=Ab%7E1+x&flag=&sig=c%2Bd%3D%3D&stream=true".
  assert.equal(remote.requests.at(-1)?.url, `/agent/bot-1/chat?${query}&stream=true`);
  // A stream flag of the url's own is replaced, so the remote streams.
  const flagged = new HTTPTransport(`${remote.base}?stream=false&v=2`);
  assert.deepEqual(await collect(flagged.stream('bot-1', 'z')), ['z']);
  assert.equal(remote.requests.at(-1)?.url, '/agent/bot-1/chat?stream=true&v=2');
});

test('only the configured headers, content type, accept and a request id go out', async (t) => {
  const remote = await fakeRemote(t);
  const transport = new HTTPTransport(remote.base, { headers: { Authorization: 'Bearer token-123', 'X-Api-Key': 'key-456' } });
  await transport.chat('bot-1', 'x');
  await transport.invoke('bot-1', 'm', {}, { requestId: 'req-from-caller-1' });
  await transport.state('bot-1');
  await collect(transport.stream('bot-1', 'x'));
  // What Node's fetch adds on its own; none of it identifies or authenticates anyone.
  const fetchDefaults = ['host', 'connection', 'content-length', 'accept-language', 'sec-fetch-mode', 'user-agent', 'accept-encoding'];
  const allowed = new Set([...fetchDefaults, 'authorization', 'x-api-key', 'content-type', 'accept', 'x-request-id']);
  const requestIds = new Set<string>();
  for (const request of remote.requests) {
    assert.equal(request.headers.authorization, 'Bearer token-123');
    assert.equal(request.headers['x-api-key'], 'key-456');
    for (const name of Object.keys(request.headers)) assert.ok(allowed.has(name), `unexpected header ${name}`);
    assert.equal(request.headers.cookie, undefined);
    requestIds.add(String(request.headers['x-request-id']));
  }
  assert.equal(remote.requests[1]?.headers['x-request-id'], 'req-from-caller-1');
  assert.equal(requestIds.size, 4, 'each request has its own id');
  assert.match(String(remote.requests[0]?.headers['x-request-id']), /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$/);
});

test('a configured header fetch would drop unseen (host) or fail every request on (framing) is refused when the transport is made', async (t) => {
  const remote = await fakeRemote(t);
  // Node's fetch sends the url's host: a virtual host name configured here never reached the remote.
  assert.throws(() => new HTTPTransport(remote.base, { headers: { Host: 'agents.internal' } }), (error: Error) => error instanceof TypeError && /host/.test(error.message) && /url/.test(error.message));
  // These made every call fail (or hang until the timeout), reported as a remote that could not be reached.
  for (const [name, value] of [['Content-Length', '3'], ['Transfer-Encoding', 'chunked'], ['Keep-Alive', 'timeout=5'], ['Upgrade', 'websocket'], ['Expect', '100-continue']]) {
    assert.throws(() => new HTTPTransport(remote.base, { headers: { [name as string]: value as string } }), (error: Error) => error instanceof TypeError && error.message.includes(`cannot set ${(name as string).toLowerCase()}`), name);
  }
  // A fetch of the caller's own may send a Host; and a header fetch honours still goes out.
  let sentHost: string | null = null;
  const ownFetch = (url: URL, init: RequestInit) => {
    sentHost = new Headers(init.headers).get('host');
    return fetch(url, init);
  };
  assert.equal(await new HTTPTransport(remote.base, { headers: { Host: 'agents.internal' }, fetch: ownFetch }).chat('bot-1', 'hi'), 'echo: hi');
  assert.equal(sentHost, 'agents.internal');
  assert.equal(await new HTTPTransport(remote.base, { headers: { Connection: 'close' } }).chat('bot-1', 'hello'), 'echo: hello');
  assert.equal(remote.requests.at(-1)?.headers.connection, 'close');
});

test('a token that expires goes out fresh on each request through a fetch of the caller\'s own, as the README shows', async (t) => {
  const remote = await fakeRemote(t);
  let issued = 0;
  const tokens = { get: async () => `token-${++issued}` }; // a cloud identity token or an OAuth client, say
  const transport = new HTTPTransport(remote.base, {
    headers: { 'x-tenant': 'acme' },
    fetch: async (url, init) => fetch(url, { ...init, headers: { ...init.headers, authorization: `Bearer ${await tokens.get()}` } }),
  });
  assert.equal(await transport.chat('bot-1', 'one'), 'echo: one');
  assert.equal(await transport.chat('bot-1', 'two'), 'echo: two');
  assert.deepEqual(
    remote.requests.map(({ headers }) => [headers.authorization, headers['x-tenant'], headers['content-type']]),
    [['Bearer token-1', 'acme', 'application/json'], ['Bearer token-2', 'acme', 'application/json']],
  );
});

test('an unreachable remote is a 502 upstream_unreachable naming the remote, never the credentials', async (t) => {
  const { url, close } = await listen(() => {});
  await close(); // the port is now closed
  const transport = new HTTPTransport(`${url}/agent`, { headers: { Authorization: 'Bearer secret-token' } });
  await assert.rejects(
    transport.chat('bot-1', 'x'),
    upstream(502, 'upstream_unreachable', (error) => {
      assert.ok(error.message.includes(`${url}/agent/bot-1/chat`), error.message);
      assert.ok(!error.message.includes('secret-token'));
    }),
  );
  await assert.rejects(transport.stream('bot-1', 'x').ready, upstream(502, 'upstream_unreachable'));
});

test('a remote whose TLS certificate is refused, or an https url to a port without TLS, is 502 upstream_unreachable saying why, not "check that the remote is up"', async (t) => {
  // Self-signed for localhost (test/fixtures), as an internal remote's certificate from a private CA looks here.
  const cert = readFileSync('test/fixtures/tls-self-signed-cert.pem');
  const server = https.createServer({ cert, key: readFileSync('test/fixtures/tls-self-signed-key.pem') }, (_req, res) => json(res, 200, { response: 'over TLS' }));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  const { port } = server.address() as AddressInfo;
  const refused = (code: string, fix: RegExp) => upstream(502, 'upstream_unreachable', (error) => {
    assert.ok(error.message.includes(`no TLS connection to https://`) && error.message.includes(`(${code})`), error.message);
    assert.match(error.message, fix);
    assert.ok(!error.message.includes('check that the remote is up'), error.message);
    assert.equal(error.publicMessage, 'The remote agent could not be reached');
  });
  await assert.rejects(new HTTPTransport(`https://localhost:${port}/agent`).chat('bot-1', 'x'), refused('DEPTH_ZERO_SELF_SIGNED_CERT', /NODE_EXTRA_CA_CERTS/));
  // Trusted, but the url names the remote by an address its certificate does not hold.
  const trusting = await undiciFetch({ connect: { ca: cert } });
  await assert.rejects(new HTTPTransport(`https://127.0.0.1:${port}/agent`, { fetch: trusting }).chat('bot-1', 'x'), refused('ERR_TLS_CERT_ALTNAME_INVALID', /host name the certificate holds/));
  assert.equal(await new HTTPTransport(`https://localhost:${port}/agent`, { fetch: trusting }).chat('bot-1', 'x'), 'over TLS');
  // https to a remote serving plain HTTP.
  const plain = await fakeRemote(t);
  await assert.rejects(new HTTPTransport(plain.base.replace('http:', 'https:')).chat('bot-1', 'x'), refused('ERR_SSL_WRONG_VERSION_NUMBER', /does not speak TLS/));
});

test('a remote silent past the timeout is a 504 upstream_timeout, and the request is dropped', async (t) => {
  const remote = await fakeRemote(t, () => {}); // never answers
  const transport = new HTTPTransport(remote.base, { timeout: 0.1 });
  await assert.rejects(transport.chat('bot-1', 'x'), upstream(504, 'upstream_timeout', (error) => assert.match(error.message, /0\.1 s/)));
  const request = remote.requests[0] as Captured;
  await request.closed;
  assert.equal(request.aborted(), true);
  await assert.rejects(transport.stream('bot-1', 'x').ready, upstream(504, 'upstream_timeout'));
});

test('a remote that takes the request and then drops the connection is 502 upstream_interrupted, not "could not be reached"', async (t) => {
  const remote = await fakeRemote(t, (req) => {
    req.socket.destroy();
  });
  await assert.rejects(
    new HTTPTransport(remote.base).chat('bot-1', 'x'),
    upstream(502, 'upstream_interrupted', (error) => {
      assert.match(error.message, /broke off before it answered \((UND_ERR_SOCKET|ECONNRESET)\); the request may have reached it/);
      assert.equal((error as { publicMessage?: string }).publicMessage, 'The connection to the remote agent broke off before it answered');
    }),
  );
  assert.equal(remote.requests.length, 1, 'the remote did get the request');
});

test('a remote that answers something that is not HTTP is 502 upstream_bad_response saying so, not "could not be reached"', async (t) => {
  const remote = await fakeRemote(t, (req, _res, captured) => {
    const { id } = route(captured);
    // Bytes on the socket itself, past Node's writer: a malformed status line, or a chunk size mid-stream.
    if (id === 'status') req.socket.end('HTTP/1.1 abc\r\n\r\n');
    else req.socket.end('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\ne\r\ndata: first\n\n\r\nzz\r\n');
  });
  const transport = new HTTPTransport(remote.base);
  const notHttp = (code: string) => upstream(502, 'upstream_bad_response', (error) => {
    assert.match(error.message, new RegExp(`/agent/\\w+/chat answered with something that is not HTTP \\(${code}\\)`));
    assert.equal(error.publicMessage, 'The remote agent answered with something that is not HTTP');
  });
  // Node 24's fetch throws llhttp's HTTPParserError without its HPE_ code.
  await assert.rejects(transport.chat('status', 'x'), notHttp('(HPE_INVALID_STATUS|HTTPParserError)'));
  await assert.rejects(transport.stream('status', 'x').ready, notHttp('(HPE_INVALID_STATUS|HTTPParserError)'));
  const chunks: string[] = [];
  await assert.rejects(async () => {
    for await (const chunk of transport.stream('chunk', 'x')) chunks.push(chunk);
  }, notHttp('(HPE_INVALID_CHUNK_SIZE|HTTPParserError)'));
  assert.deepEqual(chunks, ['first']);
  // What a router's caller is answered.
  const registry = new AgentRegistry();
  registry.register('.*', transport);
  const { url, close } = await listen(new AgentRouter(registry, { logger: { error: () => {} } }).toRequestListener());
  t.after(close);
  const answered = await fetch(`${url}/status/chat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"message":"x"}' });
  assert.equal(answered.status, 502);
  assert.deepEqual(await answered.json(), { error: 'The remote agent answered with something that is not HTTP', code: 'upstream_bad_response' });
});

test('a remote that answers with headers larger than Node\'s fetch reads is 502 upstream_bad_response, not "could not be reached"', async (t) => {
  const remote = await fakeRemote(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'x-padding': 'a'.repeat(20 * 1024) });
    res.end('{"agent_id":"bot-1","response":"hi"}');
  });
  await assert.rejects(new HTTPTransport(remote.base).chat('bot-1', 'x'), upstream(502, 'upstream_bad_response', (error) => {
    assert.match(error.message, /answered with headers larger than Node's fetch accepts$/);
  }));
});

test("fetch's own timeouts (undici's, under a longer transport timeout) are 504 upstream_timeout that say so", async (t) => {
  const fetchWithLimits = await shortUndiciTimeouts();
  const silent = await fakeRemote(t, () => {});
  const saysWhy = (error: AgentRouterError): void => assert.match(error.message, /Node's fetch stopped waiting .*UND_ERR_(HEADERS|BODY)_TIMEOUT.*pass a fetch bound to an undici dispatcher/);
  await assert.rejects(new HTTPTransport(silent.base, { timeout: 30, fetch: fetchWithLimits }).chat('bot-1', 'x'), upstream(504, 'upstream_timeout', saysWhy));
  const stalls = await fakeRemote(t, (_req, res) => {
    sseHead(res);
    res.write('data: first\n\n'); // then nothing, and no pings
  });
  await assert.rejects(async () => {
    for await (const _chunk of new HTTPTransport(stalls.base, { timeout: 30, fetch: fetchWithLimits }).stream('bot-1', 'x'));
  }, upstream(504, 'upstream_timeout', saysWhy));
});

test('a stream that goes silent mid-way throws 504 from the iterator', async (t) => {
  const remote = await fakeRemote(t, (_req, res) => {
    sseHead(res);
    res.write('data: first\n\n'); // then nothing, never done
  });
  const chunks: string[] = [];
  await assert.rejects(async () => {
    for await (const chunk of new HTTPTransport(remote.base, { timeout: 0.1 }).stream('bot-1', 'x')) chunks.push(chunk);
  }, upstream(504, 'upstream_timeout'));
  assert.deepEqual(chunks, ['first']);
  await remote.requests[0]?.closed;
});

test('a remote that dies mid-stream makes the iterator throw 502 (never a clean end)', async (t) => {
  const remote = await fakeRemote(t, (req, res) => {
    sseHead(res);
    res.write('data: first\n\n', () => req.socket.destroy());
  });
  const chunks: string[] = [];
  await assert.rejects(async () => {
    for await (const chunk of new HTTPTransport(remote.base).stream('bot-1', 'x')) chunks.push(chunk);
  }, upstream(502, 'upstream_interrupted'));
  assert.deepEqual(chunks, ['first']);
});

test('a stream is over at "event: done", even when the remote keeps the response open after it; its connection is let go within seconds', async (t) => {
  let closed!: () => void;
  const connectionClosed = new Promise<void>((resolve) => (closed = resolve));
  const remote = await fakeRemote(t, (_req, res) => {
    sseHead(res);
    res.write('data: hello\n\nevent: done\ndata: [DONE]\n\n'); // and never ends the response
    // Comments after the end keep the body open and every idle timer fed.
    const ping = setInterval(() => res.write(': ping\n\n'), 100);
    res.on('close', () => {
      clearInterval(ping);
      closed();
    });
  });
  // The watchdog would end the read after `timeout` (60 s); the stream must be over long before.
  const transport = new HTTPTransport(remote.base, { timeout: 60 });
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<string>((resolve) => (timer = setTimeout(() => resolve('still waiting after 10 s'), 10_000)));
  const outcome = await Promise.race([collect(transport.stream('bot-1', 'x')), hung]);
  clearTimeout(timer);
  assert.deepEqual(outcome, ['hello']);
  // The rest of the body is read for a moment (so the connection could be reused), then cancelled.
  const held = new Promise<string>((resolve) => (timer = setTimeout(() => resolve('connection still open after 5 s'), 5000)));
  assert.equal(await Promise.race([connectionClosed.then(() => 'closed'), held]), 'closed');
  clearTimeout(timer);
});

test('a stream that ends without "event: done" throws 502 upstream_incomplete', async (t) => {
  const remote = await fakeRemote(t, (_req, res) => {
    sseHead(res);
    res.end('data: first\n\ndata: second\n\n');
  });
  const chunks: string[] = [];
  await assert.rejects(async () => {
    for await (const chunk of new HTTPTransport(remote.base).stream('bot-1', 'x')) chunks.push(chunk);
  }, upstream(502, 'upstream_incomplete'));
  assert.deepEqual(chunks, ['first', 'second']);
});

test('"event: error" from the remote is thrown with its message, naming the remote\'s origin, and its code', async (t) => {
  const remote = await fakeRemote(t, (_req, res) => {
    sseHead(res);
    res.end('data: partial\n\nevent: error\ndata: {"error": "Internal error", "code": "internal_error"}\n\ndata: after\n\n');
  });
  const chunks: string[] = [];
  await assert.rejects(async () => {
    for await (const chunk of new HTTPTransport(remote.base).stream('bot-1', 'x')) chunks.push(chunk);
  }, upstream(502, 'internal_error', (error) => assert.equal(error.message, `Internal error${from(remote)}`)));
  assert.deepEqual(chunks, ['partial']);
});

test('a remote 4xx JSON error is relayed with its status, message and code (and Retry-After), naming the remote\'s origin in its message and Agent-Router-Upstream', async (t) => {
  const remote = await fakeRemote(t, (_req, res, captured) => {
    const { id } = route(captured);
    if (id === 'busy') {
      res.setHeader('retry-after', '7');
      return json(res, 429, { error: 'Too many agents', code: 'too_many_agents' });
    }
    json(res, 404, { error: `AgentRegistry: no pattern matches agent id "${id}"`, code: 'agent_not_found' });
  });
  const transport = new HTTPTransport(remote.base);
  const origin = new URL(remote.base).origin;
  const notFound = upstream(404, 'agent_not_found', (error) => {
    assert.equal(error.message, `AgentRegistry: no pattern matches agent id "ghost"${from(remote)}`);
    assert.deepEqual(error.headers, { 'Agent-Router-Upstream': origin });
  });
  await assert.rejects(transport.chat('ghost', 'x'), notFound);
  await assert.rejects(transport.invoke('ghost', 'm'), notFound);
  await assert.rejects(transport.state('ghost'), notFound);
  const stream = transport.stream('ghost', 'x');
  await assert.rejects(stream.ready, notFound);
  await assert.rejects(collect(stream), notFound); // iterating rethrows what ready rejected with
  await assert.rejects(transport.chat('busy', 'x'), upstream(429, 'too_many_agents', (error) => assert.deepEqual(error.headers, { 'Retry-After': '7', 'Agent-Router-Upstream': origin })));
});

test("a remote's error message is relayed on one line, 500 characters at most, so it cannot forge lines in this router's log", async (t) => {
  const forged = 'Bad input\n2026-11-24T21:00:00Z AgentRouter: admin logged in\r\u2028\u0000';
  const remote = await fakeRemote(t, (_req, res, captured) => {
    if (route(captured).id === 'long') return json(res, 400, { error: 'x'.repeat(499) + '👋'.repeat(100), code: 'bad_input' });
    if (route(captured).id === 'refused') return json(res, 401, { error: 'no', code: `x\n${forged}` });
    if (captured.url.includes('stream=')) {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(`event: error\ndata: ${JSON.stringify({ error: forged, code: 'internal_error' })}\n\n`);
      return;
    }
    json(res, 400, { error: forged, code: 'bad_input' });
  });
  const transport = new HTTPTransport(remote.base);
  const oneLine = `Bad input 2026-11-24T21:00:00Z AgentRouter: admin logged in ${from(remote)}`;
  await assert.rejects(transport.chat('bot-1', 'x'), upstream(400, 'bad_input', (error) => assert.equal(error.message, oneLine)));
  await assert.rejects(collect(transport.stream('bot-1', 'x')), upstream(502, 'internal_error', (error) => assert.equal(error.message, oneLine)));
  // Cut before an emoji's second half, not between its two.
  await assert.rejects(transport.chat('long', 'x'), upstream(400, 'bad_input', (error) => assert.equal(error.message, 'x'.repeat(499) + from(remote))));
  // A code that is not one our routers write is not quoted into the message at all.
  await assert.rejects(transport.chat('refused', 'x'), upstream(502, 'upstream_refused', (error) => {
    assert.equal(error.message, `HTTPTransport: ${remote.base}/refused/chat answered 401; check the transport's url and headers`);
  }));
});

test('a remote 4xx about the hop itself (credentials, a url that is no agent router, 499) is a 502, and a router answers it', async (t) => {
  const statuses: Record<string, [number, string]> = {
    auth: [401, 'unauthorized'],
    forbidden: [403, 'forbidden'],
    path: [404, 'not_found'],
    method: [405, 'method_not_allowed'],
    hungup: [499, 'client_closed'],
  };
  const remote = await fakeRemote(t, (_req, res, captured) => {
    const [status, code] = statuses[route(captured).id] as [number, string];
    json(res, status, { error: 'No route for POST /internal-v2/agent/x/chat', code });
  });
  const transport = new HTTPTransport(remote.base);
  for (const [id, [status]] of Object.entries(statuses)) {
    await assert.rejects(
      transport.chat(id, 'x'),
      upstream(502, 'upstream_refused', (error) => assert.equal((error as AgentRouterError).publicMessage, `The remote agent refused the request (${status})`)),
      id,
    );
  }
  const registry = new AgentRegistry();
  registry.register('.*', transport);
  const { url, close } = await listen(new AgentRouter(registry, { logger: { error: () => {} } }).toRequestListener());
  t.after(close);
  const answered = await fetch(`${url}/hungup/chat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"message":"x"}', signal: AbortSignal.timeout(5000) });
  assert.equal(answered.status, 502);
  assert.deepEqual(await answered.json(), { error: 'The remote agent refused the request (499)', code: 'upstream_refused' });
});

test('a 4xx without a JSON error body is a 502', async (t) => {
  const remote = await fakeRemote(t, (_req, res, captured) => {
    const { id } = route(captured);
    // A gateway's own refusals: no {"error", "code"} as our routers write them, so never taken for an action's.
    if (id === 'gateway') return json(res, 403, { message: 'Forbidden' });
    if (id === 'uncoded') return json(res, 410, { error: 'Gone' });
    res.writeHead(400, { 'content-type': 'text/html' });
    res.end('<h1>Bad Request</h1>');
  });
  const transport = new HTTPTransport(remote.base);
  await assert.rejects(transport.chat('bot-1', 'x'), upstream(502, 'upstream_bad_response'));
  await assert.rejects(transport.chat('gateway', 'x'), upstream(502, 'upstream_refused'));
  await assert.rejects(transport.chat('uncoded', 'x'), upstream(502, 'upstream_refused'));
});

test('a remote 5xx is a 502 naming the remote, not its body', async (t) => {
  const remote = await fakeRemote(t, (_req, res) => json(res, 500, { error: 'SECRET stack trace at db.js:12' }));
  const transport = new HTTPTransport(remote.base);
  const check = upstream(502, 'upstream_error', (error) => {
    assert.equal(error.message, `HTTPTransport: ${remote.base}/bot-1/chat answered 500; see the remote's logs`);
    assert.ok(!error.message.includes('SECRET'));
  });
  await assert.rejects(transport.chat('bot-1', 'x'), check);
  await assert.rejects(transport.stream('bot-1', 'x').ready, check);
});

test("a remote 502 of our routers' own (its own remote or model failed) is relayed with its code, message and Retry-After; any other body unquoted", async (t) => {
  const remote = await fakeRemote(t, (_req, res, captured) => {
    const { id } = route(captured);
    if (id === 'down') return json(res, 502, { error: 'The remote agent could not be reached', code: 'upstream_unreachable' });
    if (id === 'model') {
      res.setHeader('retry-after', '7');
      return json(res, 502, { error: 'Request failed', code: 'model_rate_limited' });
    }
    if (id === 'foreign') return json(res, 502, { error: 'SECRET backend 10.0.0.5 refused', code: 'bad_gateway' });
    if (id === 'huge') return json(res, 502, { error: 'x'.repeat(100_000), code: 'upstream_unreachable' });
    // A gateway before the remote that could not reach it.
    res.writeHead(502, { 'content-type': 'text/html' });
    res.end('<h1>SECRET 502 Bad Gateway</h1>');
  });
  const transport = new HTTPTransport(remote.base);
  const down = upstream(502, 'upstream_unreachable', (error) => assert.equal(error.message, `The remote agent could not be reached${from(remote)}`));
  await assert.rejects(transport.chat('down', 'x'), down);
  await assert.rejects(transport.stream('down', 'x').ready, down);
  await assert.rejects(transport.state('model'), upstream(502, 'model_rate_limited', (error) => assert.deepEqual(error.headers, { 'Retry-After': '7', 'Agent-Router-Upstream': new URL(remote.base).origin })));
  for (const id of ['foreign', 'huge', 'gateway']) {
    await assert.rejects(transport.invoke(id, 'm'), upstream(502, 'upstream_error', (error) => {
      assert.equal(error.message, `HTTPTransport: ${remote.base}/${id}/invoke answered 502; see the remote's logs`);
      assert.equal(error.publicMessage, 'The remote agent answered 502');
    }), id);
  }
});

test('a remote 503 stays a 503 with its Retry-After in seconds: our routers\' code relayed, any other body unquoted', async (t) => {
  const remote = await fakeRemote(t, (_req, res, captured) => {
    const { id } = route(captured);
    if (id === 'draining') {
      res.setHeader('retry-after', '7');
      return json(res, 503, { error: 'The server is shutting down', code: 'shutting_down' });
    }
    if (id === 'foreign') return json(res, 503, { error: 'SECRET backend 10.0.0.5 is down', code: 'no_backend' });
    if (id === 'huge') return json(res, 503, { error: 'x'.repeat(100_000) });
    // A load balancer with no healthy backend: HTML, and a date the caller's clock may not share.
    res.writeHead(503, { 'content-type': 'text/html', 'retry-after': 'Wed, 21 Oct 2026 07:28:00 GMT' });
    res.end('<h1>SECRET no healthy upstream</h1>');
  });
  const transport = new HTTPTransport(remote.base);
  const draining = upstream(503, 'shutting_down', (error) => {
    assert.equal(error.message, `The server is shutting down${from(remote)}`);
    assert.deepEqual((error as AgentRouterError).headers, { 'Retry-After': '7', 'Agent-Router-Upstream': new URL(remote.base).origin });
  });
  await assert.rejects(transport.chat('draining', 'x'), draining);
  await assert.rejects(transport.stream('draining', 'x').ready, draining);
  await assert.rejects(transport.chat('balancer', 'x'), upstream(503, 'upstream_unavailable', (error) => {
    assert.equal(error.message, `HTTPTransport: ${remote.base}/balancer/chat answered 503 (unavailable for now)`);
    assert.equal((error as AgentRouterError).headers, undefined);
  }));
  // Only our routers' own 503 codes are relayed with their message; a body too large to read is still a 503.
  for (const id of ['foreign', 'huge']) {
    await assert.rejects(transport.chat(id, 'x'), upstream(503, 'upstream_unavailable', (error) => assert.ok(!error.message.includes('SECRET'), id)), id);
  }

  const registry = new AgentRegistry();
  registry.register('.*', transport);
  const logged: string[] = [];
  const { url, close } = await listen(new AgentRouter(registry, { logger: { error: (message) => logged.push(message) } }).toRequestListener());
  t.after(close);
  const post = (id: string) =>
    fetch(`${url}/${id}/chat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"message":"x"}', signal: AbortSignal.timeout(5000) });
  const relayed = await post('draining');
  assert.equal(relayed.status, 503);
  assert.equal(relayed.headers.get('retry-after'), '7');
  assert.equal(relayed.headers.get('agent-router-upstream'), new URL(remote.base).origin);
  assert.deepEqual(await relayed.json(), { error: `The server is shutting down${from(remote)}`, code: 'shutting_down' });
  const balancer = await post('balancer');
  assert.equal(balancer.status, 503);
  assert.equal(balancer.headers.get('retry-after'), null);
  assert.deepEqual(await balancer.json(), { error: 'The remote agent is unavailable for now (503); try again later', code: 'upstream_unavailable' });
  // The operator hears of a remote's 503s (a load balancer refusing for ever shows nowhere else).
  assert.deepEqual(logged, ['AgentRouter: request failed with 503', 'AgentRouter: request failed with 503']);
});

test("a gateway's 429 or 413 without our routers' error body stays a 429 or 413, its Retry-After passed on and its body unquoted", async (t) => {
  const remote = await fakeRemote(t, (_req, res, captured) => {
    const { id } = route(captured);
    // An API gateway's refusals: {"message"} (AWS, Kong), an HTML page (nginx), one too large to read, or none.
    if (id === 'kong') return void res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '30' }).end('{"message": "SECRET API rate limit exceeded for 10.0.0.5"}');
    if (id === 'nginx') return void res.writeHead(413, { 'content-type': 'text/html' }).end('<h1>SECRET 413 Request Entity Too Large</h1>');
    if (id === 'huge') return void res.writeHead(429, { 'content-type': 'text/html', 'retry-after': '5' }).end('x'.repeat(100_000));
    res.writeHead(429, { 'retry-after': 'Wed, 21 Oct 2026 07:28:00 GMT' }).end();
  });
  const transport = new HTTPTransport(remote.base);
  const limited = (retryAfter: string | undefined) => upstream(429, 'upstream_rate_limited', (error) => {
    assert.match(error.message, /^HTTPTransport: http:\S+ answered 429 \(rate limited\) without our routers' error body/);
    assert.ok(!error.message.includes('SECRET'));
    assert.equal(error.publicMessage, 'The remote agent is rate limiting requests (429); try again later');
    assert.deepEqual(error.headers, retryAfter === undefined ? undefined : { 'Retry-After': retryAfter });
  });
  await assert.rejects(transport.chat('kong', 'x'), limited('30'));
  await assert.rejects(transport.stream('kong', 'x').ready, limited('30'));
  await assert.rejects(transport.invoke('huge', 'm'), limited('5'));
  await assert.rejects(transport.state('empty'), limited(undefined)); // an HTTP date is not passed on (the clocks may differ)
  await assert.rejects(transport.chat('nginx', 'x'), upstream(413, 'upstream_body_too_large', (error) => {
    assert.equal(error.publicMessage, 'The remote agent refused the request body as too large (413)');
    assert.ok(!error.message.includes('SECRET'));
  }));

  const registry = new AgentRegistry();
  registry.register('.*', transport);
  const { url, close } = await listen(new AgentRouter(registry, { logger: { error: () => {} } }).toRequestListener());
  t.after(close);
  const answered = await fetch(`${url}/kong/chat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"message":"x"}', signal: AbortSignal.timeout(5000) });
  assert.equal(answered.status, 429);
  assert.equal(answered.headers.get('retry-after'), '30');
  assert.deepEqual(await answered.json(), { error: 'The remote agent is rate limiting requests (429); try again later', code: 'upstream_rate_limited' });
});

test('a remote 504 stays a 504: our routers\' timeout codes relayed, any other body unquoted', async (t) => {
  const remote = await fakeRemote(t, (_req, res, captured) => {
    const { id } = route(captured);
    if (id === 'turn') return json(res, 504, { error: 'The turn did not complete within 300 s', code: 'turn_timeout' });
    if (id === 'foreign') return json(res, 504, { error: 'SECRET backend 10.0.0.5 timed out', code: 'backend_timeout' });
    // A gateway before the remote that gave up waiting for it.
    res.writeHead(504, { 'content-type': 'text/html' });
    res.end('<h1>SECRET 504 Gateway Time-out</h1>');
  });
  const transport = new HTTPTransport(remote.base);
  const turn = upstream(504, 'turn_timeout', (error) => assert.equal(error.message, `The turn did not complete within 300 s${from(remote)}`));
  await assert.rejects(transport.chat('turn', 'x'), turn);
  await assert.rejects(transport.stream('turn', 'x').ready, turn);
  for (const id of ['foreign', 'gateway']) {
    await assert.rejects(transport.invoke(id, 'm'), upstream(504, 'upstream_timeout', (error) => {
      assert.equal(error.publicMessage, 'The remote agent timed out (504)');
      assert.ok(!error.message.includes('SECRET'), id);
    }), id);
  }
});

test('a 200 that is not JSON, or JSON of the wrong shape, is a 502', async (t) => {
  const remote = await fakeRemote(t, (_req, res, captured) => {
    const { id } = route(captured);
    if (id === 'html') {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end('<html>login</html>');
      return;
    }
    if (id === 'array') return json(res, 200, [1, 2]);
    if (id === 'huge') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"agent_id":"huge","result":{"balance":1e400}}');
      return;
    }
    if (id === 'nested') return json(res, 200, { agent_id: id, state: { a: JSON.parse(`${'['.repeat(500)}${']'.repeat(500)}`) } });
    if (id === 'deep') {
      // Nested far past what JSON.stringify can write back out: the caller's reply would overflow the stack.
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`{"agent_id":"deep","state":{"a":${'['.repeat(100_000)}${']'.repeat(100_000)}}}`);
      return;
    }
    json(res, 200, { agent_id: id, unexpected: true });
  });
  const transport = new HTTPTransport(remote.base);
  await assert.rejects(transport.chat('html', 'x'), upstream(502, 'upstream_bad_response', (e) => assert.match(e.message, /not JSON/)));
  await assert.rejects(transport.chat('array', 'x'), upstream(502, 'upstream_bad_response'));
  await assert.rejects(transport.chat('shape', 'x'), upstream(502, 'upstream_bad_response', (e) => assert.match(e.message, /"response"/)));
  await assert.rejects(transport.invoke('shape', 'm'), upstream(502, 'upstream_bad_response', (e) => assert.match(e.message, /"result"/)));
  await assert.rejects(transport.state('shape'), upstream(502, 'upstream_bad_response', (e) => assert.match(e.message, /"state"/)));
  await assert.rejects(transport.state('deep'), upstream(502, 'upstream_bad_response', (e) => assert.match(e.message, /nested deeper than 1000 levels/)));
  await assert.rejects(transport.invoke('huge', 'm'), upstream(502, 'upstream_bad_response', (e) => assert.match(e.message, /a number too large to represent/)));
  // Deeper than a request body may be, as a result or state may well be: relayed as it is.
  const nested = await transport.state('nested');
  assert.equal(JSON.stringify(nested), `{"a":${'['.repeat(500)}${']'.repeat(500)}}`);
  // A stream request answered with JSON is refused before iteration.
  await assert.rejects(transport.stream('shape', 'x').ready, upstream(502, 'upstream_bad_response', (e) => assert.match(e.message, /text\/event-stream/)));
});

test('a JSON reply over maxResponseSize is a 502, and the connection is dropped', async (t) => {
  const remote = await fakeRemote(t, (_req, res) => json(res, 200, { response: 'x'.repeat(5000) }));
  await assert.rejects(new HTTPTransport(remote.base, { maxResponseSize: 1024 }).chat('bot-1', 'x'), upstream(502, 'upstream_bad_response'));
});

test('a stream is bounded by maxResponseSize in all, not only per event: a remote that never ends its reply is cut', async (t) => {
  const remote = await fakeRemote(t, (_req, res) => {
    sseHead(res);
    const timer = setInterval(() => res.write(`data: ${'x'.repeat(100)}\n\n`), 1); // small events, for ever
    res.on('close', () => clearInterval(timer));
  });
  const chunks: string[] = [];
  await assert.rejects(async () => {
    for await (const chunk of new HTTPTransport(remote.base, { maxResponseSize: 4096 }).stream('bot-1', 'x')) chunks.push(chunk);
  }, upstream(502, 'upstream_bad_response', (e) => assert.match(e.message, /a stream longer than maxResponseSize \(4096 bytes\) in all/)));
  assert.ok(chunks.length > 0 && chunks.length < 4096 / 100, `${chunks.length} events relayed before the cut`);
});

test('only a 307 or 308 within the remote\'s origin is followed, with the same request; any other 3xx is a 502', async (t) => {
  const elsewhere = await fakeRemote(t);
  const remote = await fakeRemote(t, (req, res, captured) => {
    const { id } = route(captured);
    const query = captured.url.includes('?') ? captured.url.slice(captured.url.indexOf('?')) : '';
    const to: Record<string, [number, string]> = {
      cross: [307, `${elsewhere.base}/bot-1/chat`],
      'see-other': [303, '/agent/bot-1/chat'],
      moved: [301, '/agent/bot-1/chat'],
      'trailing-slash': [308, `/agent/moved-${id}/chat${query}`],
      loop: [307, '/agent/loop/chat'],
    };
    const redirect = id.startsWith('moved-') ? undefined : to[id];
    if (redirect === undefined) return void defaultRemote(req, res, captured);
    res.writeHead(redirect[0], { location: redirect[1] });
    res.end();
  });
  const transport = new HTTPTransport(remote.base, { headers: { Authorization: 'Bearer token-123' } });
  // Same origin, 308: the same method, body and configured headers go to where it points, JSON and stream.
  assert.equal(await transport.chat('trailing-slash', 'hello'), 'echo: hello');
  const chunks: string[] = [];
  for await (const chunk of transport.stream('trailing-slash', 'streamed')) chunks.push(chunk);
  assert.ok(chunks.join('').length > 0);
  const followed = remote.requests.filter((request) => request.url.startsWith('/agent/moved-trailing-slash/chat'));
  assert.equal(followed.length, 2);
  for (const request of followed) {
    assert.equal(request.method, 'POST');
    assert.equal(request.headers.authorization, 'Bearer token-123');
  }
  assert.equal(JSON.parse(followed[0]?.body ?? '{}').message, 'hello');
  assert.match(followed[1]?.url ?? '', /\?stream=true$/);
  // Another origin (it would get the credentials), a method-changing 3xx, or a loop: a 502, the remote's path not followed.
  const before = remote.requests.length;
  await assert.rejects(transport.chat('cross', 'x'), upstream(502, 'upstream_redirect'));
  await assert.rejects(transport.stream('cross', 'x').ready, upstream(502, 'upstream_redirect'));
  await assert.rejects(transport.chat('see-other', 'x'), upstream(502, 'upstream_redirect'));
  await assert.rejects(transport.chat('moved', 'x'), upstream(502, 'upstream_redirect'));
  await assert.rejects(transport.chat('loop', 'x'), upstream(502, 'upstream_redirect', (e) => assert.match(e.message, /answered 307 \(a redirect\); only a 307 or 308 within its origin is followed/)));
  assert.equal(elsewhere.requests.length, 0);
  assert.equal(remote.requests.length - before, 4 + 6, 'one request each, and the loop asked 1 + 5 times');
});

test('aborting the signal cancels a pending call: the remote sees its request close', async (t) => {
  const remote = await fakeRemote(t, () => {}); // holds every request
  const transport = new HTTPTransport(remote.base);
  const controller = new AbortController();
  const reason = new Error('client went away');
  const pending = transport.chat('bot-1', 'x', { signal: controller.signal });
  const request = await remote.next();
  controller.abort(reason);
  await assert.rejects(pending, (error) => error === reason);
  await request.closed;
  assert.equal(request.aborted(), true);
  // An already-aborted signal sends nothing.
  await assert.rejects(transport.state('bot-1', { signal: AbortSignal.abort(reason) }), (error) => error === reason);
  assert.equal(remote.requests.length, 1);
});

test('one signal shared by many calls in flight gets one listener, cuts them all, and keeps none after', async (t) => {
  const remote = await fakeRemote(t, () => {}); // holds every request
  const transport = new HTTPTransport(remote.base);
  const controller = new AbortController();
  const calls = Array.from({ length: 20 }, (_, i) => transport.chat(`bot-${i}`, 'x', { signal: controller.signal }));
  while (remote.requests.length < 20) await remote.next();
  assert.equal(getEventListeners(controller.signal, 'abort').length, 1, 'not one per call (Node warns past ten)');
  const reason = new Error('shutting down');
  controller.abort(reason);
  for (const call of calls) await assert.rejects(call, (error) => error === reason);
  // Calls that end on their own leave nothing on a signal that outlives them.
  const answering = await fakeRemote(t);
  const shared = new AbortController().signal;
  const replies = await Promise.all(Array.from({ length: 20 }, (_, i) => new HTTPTransport(answering.base).chat(`bot-${i}`, 'hi', { signal: shared })));
  assert.deepEqual(replies, Array(20).fill('echo: hi'));
  assert.equal(getEventListeners(shared, 'abort').length, 0);
});

test('aborting a stream that nobody iterates cancels its body; the remote sees the close', async (t) => {
  const remote = await fakeRemote(t, (_req, res) => {
    sseHead(res);
    res.write('data: first\n\n');
  });
  const controller = new AbortController();
  const stream = new HTTPTransport(remote.base).stream('bot-1', 'x', { signal: controller.signal });
  await stream.ready;
  controller.abort();
  const request = remote.requests[0] as Captured;
  await request.closed;
  assert.equal(request.aborted(), true);
  await assert.rejects(collect(stream), { name: 'AbortError' });
});

test('a stream nobody iterates and nobody aborts is dropped after the timeout', async (t) => {
  const remote = await fakeRemote(t, (_req, res) => {
    sseHead(res);
    res.write('data: first\n\n');
  });
  const stream = new HTTPTransport(remote.base, { timeout: 0.1 }).stream('bot-1', 'x');
  await stream.ready;
  const request = remote.requests[0] as Captured;
  await request.closed;
  assert.equal(request.aborted(), true);
});

test('aborting or breaking out mid-stream cancels the remote request', async (t) => {
  const remote = await fakeRemote(t, (_req, res) => {
    sseHead(res);
    res.write('data: first\n\n'); // and holds the rest
  });
  const transport = new HTTPTransport(remote.base);
  for await (const chunk of transport.stream('bot-1', 'x')) {
    assert.equal(chunk, 'first');
    break;
  }
  await remote.requests[0]?.closed;
  assert.equal(remote.requests[0]?.aborted(), true);

  const controller = new AbortController();
  const reason = new Error('client went away');
  await assert.rejects(async () => {
    for await (const _chunk of transport.stream('bot-2', 'x', { signal: controller.signal })) controller.abort(reason);
  }, (error) => error === reason);
  await remote.requests[1]?.closed;
  assert.equal(remote.requests[1]?.aborted(), true);
});

test('a ChunkStream can be iterated once', async (t) => {
  const remote = await fakeRemote(t);
  const stream = new HTTPTransport(remote.base).stream('bot-1', 'one two');
  assert.deepEqual(await collect(stream), ['one', 'two']);
  assert.throws(() => stream[Symbol.asyncIterator](), TypeError);
});

test('connections are kept alive and reused across calls and finished streams', async (t) => {
  const remote = await fakeRemote(t);
  const transport = new HTTPTransport(remote.base);
  for (let i = 0; i < 3; i++) {
    await transport.chat('bot-1', 'x');
    await collect(transport.stream('bot-1', 'a b'));
    await transport.state('bot-1');
  }
  const ports = new Set(remote.requests.map((request) => request.remotePort));
  assert.equal(remote.requests.length, 9);
  // Node's fetch frees a socket a tick after its body ends, so a call made at
  // once opens a second one; from then on the two are reused in turn.
  assert.ok(ports.size <= 2, `9 sequential calls used ${ports.size} connections`);
});

test('maxConnections bounds the requests in flight; the rest wait their turn', async (t) => {
  const held: http.ServerResponse[] = [];
  let inFlight = 0;
  let peak = 0;
  const remote = await fakeRemote(t, (_req, res, captured) => {
    inFlight++;
    peak = Math.max(peak, inFlight);
    res.once('finish', () => inFlight--);
    held.push(res);
    void captured;
  });
  const transport = new HTTPTransport(remote.base, { maxConnections: 2 });
  const calls = [1, 2, 3, 4, 5].map((n) => transport.chat(`bot-${n}`, 'x'));
  for (let answered = 0; answered < 5; answered++) {
    // Answer only once as many requests as allowed are in flight, so the peak is the bound.
    while (held.length < Math.min(2, 5 - answered)) await remote.next();
    json(held.shift() as http.ServerResponse, 200, { response: 'ok' });
  }
  assert.deepEqual(await Promise.all(calls), ['ok', 'ok', 'ok', 'ok', 'ok']);
  assert.equal(peak, 2);
  assert.ok(new Set(remote.requests.map((r) => r.remotePort)).size <= 2, 'at most two connections were opened');
});

test('a request still waiting for a connection slot at timeout is 503 upstream_busy, not a silent remote', async (t) => {
  const timers: NodeJS.Timeout[] = [];
  const remote = await fakeRemote(t, (_req, res) => {
    // A stream that is alive (a comment every 100 ms) but never ends: the one slot stays in use.
    sseHead(res);
    timers.push(setInterval(() => res.write(': ping\n\n'), 100));
  });
  t.after(() => timers.forEach(clearInterval));
  const transport = new HTTPTransport(remote.base, { maxConnections: 1, timeout: 0.3 });
  const held = new AbortController();
  const streaming = collect(transport.stream('bot-1', 'x', { signal: held.signal }));
  streaming.catch(() => {});
  await remote.next();
  await assert.rejects(
    transport.chat('bot-2', 'x'),
    upstream(503, 'upstream_busy', (error) => assert.deepEqual((error as AgentRouterError).headers, { 'Retry-After': '1' })),
  );
  held.abort();
  await assert.rejects(streaming);
});

test('the silence timeout starts once a slot is held: a request that queued behind another still gets its full timeout', async (t) => {
  // One slot, timeout 2 s. The first call holds the slot 1.2 s; the second's remote answers 1.2 s after
  // it is asked. Counted from the start, the second call was 2.4 s without an answer and got a 504.
  const remote = await fakeRemote(t, (_req, res) => {
    setTimeout(() => json(res, 200, { agent_id: 'bot', response: 'late but fine' }), 1200);
  });
  const transport = new HTTPTransport(remote.base, { maxConnections: 1, timeout: 2 });
  const [first, second] = await Promise.all([transport.chat('bot-1', 'x'), transport.chat('bot-2', 'x')]);
  assert.deepEqual([first, second], ['late but fine', 'late but fine']);
});

test('calls cut mid-body by the remote are all collected: no heap kept per call', async (t) => {
  // Not fakeRemote, which keeps every request it saw: this remote keeps nothing.
  const { url, close } = await listen((req, res) => {
    sseHead(res);
    res.write('data: first\n\n', () => req.socket.destroy());
  });
  t.after(close);
  const transport = new HTTPTransport(`${url}/agent`);
  const cut = async (): Promise<void> => {
    await assert.rejects(collect(transport.stream('bot-1', 'x')), upstream(502, 'upstream_interrupted'));
  };
  for (let i = 0; i < 50; i++) await cut();
  const before = await settledHeap();
  const CALLS = 1500;
  for (let i = 0; i < CALLS; i++) await cut();
  const perCall = ((await settledHeap()) - before) / CALLS;
  // Each cut call kept about 33 KB (its request, socket and errored body, held through the abort listener);
  // now 0.4 to 1.1 KB, falling as the calls go on (caches filling once, not a cost per call).
  assert.ok(perCall < 8192, `${perCall.toFixed(0)} bytes kept per cut call`);
  console.log(`heap kept per cut call: ${perCall.toFixed(0)} bytes`);
});
