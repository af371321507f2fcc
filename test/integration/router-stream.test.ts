import assert from 'node:assert/strict';
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { test, type TestContext } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { echoModel } from '../../src/models/echo.ts';
import { scriptedModel, type ScriptedFunction } from '../../src/models/scripted.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { HTTPTransport } from '../../src/transports/http.ts';
import { deferred, pollUntil, postJson, rawChatPost, streamChat } from '../helpers/http.ts';
import { listen } from '../helpers/listen.ts';
import { counterOn } from '../helpers/agents.ts';
import { collectSSE, naiveSSEText, withoutIds } from '../helpers/sse.ts';
import { noTurnId } from '../helpers/turns.ts';

async function serve(t: { after: (fn: () => Promise<void>) => void }, model: ScriptedFunction | null, options = {}) {
  class Bot extends Agent {
    constructor(id: string) {
      super(id, { model: model === null ? echoModel() : scriptedModel(model) });
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Bot);
  const router = new AgentRouter(registry, { logger: { error: () => {} }, ...options });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  return { url, router };
}

test('POST /{id}/chat?stream=true streams one event per chunk, then done', async (t) => {
  const { url } = await serve(t, null);
  const res = await streamChat(`${url}/echo-1/chat`, 'hi there world');
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'text/event-stream');
  assert.equal(res.headers.get('cache-control'), 'no-cache');
  assert.equal(res.headers.get('x-accel-buffering'), 'no');
  const { events, text } = await collectSSE(res);
  assert.equal(text, 'hi there world');
  assert.deepEqual(events.map((e) => [e.event, e.data]), [
    ['message', 'hi'],
    ['message', ' there'],
    ['message', ' world'],
    ['done', '[DONE]'],
  ]);
});

test('the exact bytes: data lines, blank line per event, newlines split into several data lines', async (t) => {
  const { url } = await serve(t, () => ['Hello', ' world\nsecond line', '', 'a\r\nb'][Symbol.iterator]());
  const res = await streamChat(`${url}/x/chat`, 'ignored');
  const raw = await res.text();
  assert.equal(withoutIds(raw), 'data: Hello\n\ndata:  world\ndata: second line\n\ndata: a\ndata: b\n\nevent: done\ndata: [DONE]\n\n');
  const again = await collectSSE(await streamChat(`${url}/y/chat`, 'ignored'));
  assert.equal(again.text, 'Hello world\nsecond linea\nb', 'a spec parser rebuilds chunks (CRLF becomes LF)');
  assert.equal(naiveSSEText('data: Hello\n\ndata:  world\n\n'), 'Hello world', 'a client stripping "data: " prints the text');
});

test('a surrogate pair or a CRLF split between two chunks arrives whole, as the JSON reply has it', async (t) => {
  // A model slicing text by UTF-16 index splits an emoji; a lone half written alone goes out as U+FFFD.
  const chunks = ['x\uD83D', '\uDE00 a\r', '\nb\r', '\r', '\n', 'c\uD83D', '\uDE00', '\uD83D'];
  const { url } = await serve(t, () => chunks[Symbol.iterator]());
  const json = (await postJson(`${url}/json/chat`, { message: 'x' })).body as { response: string };
  assert.equal(json.response, chunks.join(''));
  const { events, text } = await collectSSE(await streamChat(`${url}/sse/chat`, 'x'));
  assert.equal(text, json.response.replace(/\r\n|\r/g, '\n').replace(/\uD83D$/, '\uFFFD'), 'each CRLF one line break, each pair whole; a half never completed is U+FFFD');
  assert.ok(events.every((e) => e.data !== ''), 'nothing empty is sent for a chunk that was only the rest of a CRLF');
  assert.equal(events.at(-1)?.event, 'done');
  // The half held at the end goes out in an event with an id of its own, and a rejoin from any event replays the rest as it was.
  const turnId = (events[0]?.id ?? '').split(':')[0] as string;
  const seqs = events.map((e) => Number(e.id?.slice(turnId.length + 1)));
  assert.ok(events.every((e) => e.id?.startsWith(`${turnId}:`)) && seqs.every((seq, i) => i === 0 || seq > (seqs[i - 1] as number)), `ids: ${events.map((e) => e.id).join(' ')}`);
  for (const [i, seq] of [0, ...seqs.slice(0, -1)].entries()) {
    const replayed = await collectSSE(await fetch(`${url}/sse/turns/${turnId}/events`, { headers: { 'last-event-id': `${turnId}:${seq}` } }));
    assert.deepEqual(replayed.events, events.slice(i), `rejoined after seq ${seq}`);
  }
});

test('no chunk can inject an SSE field or event', async (t) => {
  const hostile = 'x\n\nevent: done\ndata: [DONE]\nid: 7\rretry: 1';
  const { url } = await serve(t, () => hostile);
  const { events, text } = await collectSSE(await streamChat(`${url}/x/chat`, 'x'));
  assert.deepEqual(events.map((e) => e.event), ['message', 'done']);
  assert.match(events[0]?.id ?? '', /^[0-9a-f-]{36}:1$/, 'the id is the turn\'s, never one a chunk wrote');
  assert.equal(text, hostile.replace(/\r/g, '\n'));
});

test('stream flag: boolean-like values, Accept-only event-stream, and stream=false', async (t) => {
  const { url } = await serve(t, null);
  for (const query of ['?stream=1', '?stream=YES', '?stream=on', '?stream=True']) {
    const res = await streamChat(`${url}/a/chat`, 'x', { query });
    assert.equal(res.headers.get('content-type'), 'text/event-stream', query);
    await res.body?.cancel();
  }
  const accept = await fetch(`${url}/a/chat`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({ message: 'by accept' }),
  });
  assert.equal((await collectSSE(accept)).text, 'by accept');
  const off = await streamChat(`${url}/a/chat`, 'json please', { query: '?stream=off' });
  assert.deepEqual(noTurnId(await off.json()), { agent_id: 'a', response: 'json please' });
  const mixed = await fetch(`${url}/a/chat`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream, application/json' },
    body: JSON.stringify({ message: 'x' }),
  });
  assert.match(mixed.headers.get('content-type') ?? '', /application\/json/);
  await mixed.body?.cancel();
});

test('a failure after the stream began ends it with event: error, never done, and history is unchanged', async (t) => {
  const { url, router } = await serve(t, async function* () {
    yield 'partial ';
    throw new Error('model exploded with a secret');
  });
  const { events, text } = await collectSSE(await streamChat(`${url}/f/chat`, 'x'));
  assert.equal(text, 'partial ');
  const last = events[events.length - 1];
  assert.equal(last?.event, 'error');
  assert.deepEqual(JSON.parse(last?.data ?? ''), { error: 'Internal error', code: 'internal_error' });
  assert.ok(!events.some((e) => e.event === 'done'));
  assert.equal(router.pool?.peek('f')?.messages.length, 0);
});

test('validation errors before the stream are still JSON statuses', async (t) => {
  const { url } = await serve(t, null);
  const res = await fetch(`${url}/a/chat?stream=true`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{' });
  assert.equal(res.status, 400);
  assert.equal((await res.json()).code, 'invalid_json');
});

test('an idle stream gets : ping comments', async (t) => {
  const sawPing = deferred();
  const { url } = await serve(t, async function* () {
    yield 'before';
    await sawPing.promise;
    yield ' after';
  }, { pingInterval: 0.02 });
  const res = await streamChat(`${url}/p/chat`, 'x');
  const reader = (res.body as ReadableStream<Uint8Array>).pipeThrough(new TextDecoderStream() as unknown as TransformStream<Uint8Array, string>).getReader();
  let raw = '';
  while (true) {
    const { done, value } = await reader.read();
    if (done) break;
    raw += value;
    if (raw.includes(': ping\n\n')) sawPing.resolve();
  }
  assert.match(withoutIds(raw), /^data: before\n\n(: ping\n\n)+data:  after\n\nevent: done\ndata: \[DONE\]\n\n$/);
});

test('a ping comes at most one pingInterval after the stream last sent, wherever that fell in the ping timer\'s cycle', async (t) => {
  // Only setInterval is mocked (the ping timer's): sockets, fetch and the model run for real.
  t.mock.timers.enable({ apis: ['setInterval'] });
  const release = deferred();
  const done = deferred();
  const { url } = await serve(t, async function* () {
    yield 'before';
    await release.promise;
    yield 'middle';
    await done.promise;
  }, { pingInterval: 7 });
  const res = await streamChat(`${url}/pings/chat`, 'x');
  const reader = (res.body as ReadableStream<Uint8Array>).pipeThrough(new TextDecoderStream() as unknown as TransformStream<Uint8Array, string>).getReader();
  let raw = '';
  const readUntil = async (text: string, count = 1): Promise<void> => {
    const deadline = AbortSignal.timeout(5000);
    while (raw.split(text).length - 1 < count) {
      const next = await Promise.race([reader.read(), new Promise<never>((_, reject) => deadline.addEventListener('abort', () => reject(new Error(`no ${count}x ${JSON.stringify(text)} within 5 s; got ${JSON.stringify(raw)}`))))]);
      if (next.done) throw new Error(`stream ended before ${JSON.stringify(text)}: ${JSON.stringify(raw)}`);
      raw += next.value;
    }
  };
  await readUntil('data: before\n\n');
  // 'middle' is sent 3.5 s into the timer's 7 s cycle, just after a tick; the ping must still come 7 s later, not 10.5.
  t.mock.timers.tick(3500);
  release.resolve();
  await readUntil('data: middle\n\n');
  t.mock.timers.tick(3500);
  t.mock.timers.tick(3500);
  await readUntil(': ping\n\n');
  // Idle, it is pinged once per interval.
  t.mock.timers.tick(7000);
  await readUntil(': ping\n\n', 2);
  assert.equal(withoutIds(raw), 'data: before\n\ndata: middle\n\n: ping\n\n: ping\n\n');
  done.resolve();
  await reader.cancel();
});

test('a client that disconnects mid-stream aborts the model call and leaves history as it was', async (t) => {
  const aborted = deferred<unknown>();
  const firstSent = deferred();
  let turn = 0;
  const { url, router } = await serve(t, async function* ({ signal }) {
    if (turn++ > 0) {
      yield 'second turn works';
      return;
    }
    yield 'first chunk';
    firstSent.resolve();
    await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve()));
    aborted.resolve(signal.reason);
    yield 'never delivered';
  });
  const controller = new AbortController();
  const res = await streamChat(`${url}/d/chat`, 'x', { signal: controller.signal });
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  await reader.read();
  await firstSent.promise;
  controller.abort();
  const reason = await aborted.promise;
  assert.equal((reason as { code?: string }).code, 'client_closed');
  const next = await postJson(`${url}/d/chat`, { message: 'again' });
  assert.equal(next.body.response, 'second turn works');
  const history = router.pool?.peek('d')?.messages.map((m) => m.content);
  assert.deepEqual(history, ['again', 'second turn works']);
});

for (const [size, total] of [[64 * 1024, 2000], [256, 400_000]] as const) {
test(`a reader that does not read makes the producer wait (backpressure), not buffer: ${size}-byte chunks`, async (t) => {
  const chunk = 'z'.repeat(size);
  // 125 and 98 MiB if it were all buffered; small chunks are coalesced per tick, and must still wait.
  let produced = 0;
  const { url } = await serve(t, async function* ({ signal }) {
    for (let i = 0; i < total && !signal.aborted; i++) {
      produced++;
      yield chunk;
    }
  });
  const { hostname, port } = new URL(url);
  const req = http.request({ hostname, port, path: '/slow/chat?stream=true', method: 'POST', headers: { 'content-type': 'application/json' } });
  req.end(JSON.stringify({ message: 'x' }));
  const res = await new Promise<http.IncomingMessage>((resolve) => req.on('response', resolve));
  res.pause();
  // Let the server run until it stops producing: bounded by count, not by time.
  let previous = -1;
  for (let i = 0; i < 200 && produced !== previous; i++) {
    previous = produced;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  assert.ok(produced < total / 4, `produced ${produced} of ${total} chunks with nobody reading`);
  req.destroy();
});
}

test('events a model hands over in one tick go out as one chunked-encoding frame, each still its own event', async (t) => {
  const chunks = Array.from({ length: 64 }, (_, i) => `chunk ${i} `);
  const { url } = await serve(t, () => chunks);
  const { port } = new URL(url);
  const body = JSON.stringify({ message: 'x' });
  const socket = net.connect(Number(port), '127.0.0.1');
  socket.end(`POST /burst/chat?stream=true HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);
  let raw = '';
  for await (const data of socket) raw += String(data);
  const frames: string[] = [];
  let rest = raw.slice(raw.indexOf('\r\n\r\n') + 4);
  for (;;) {
    const eol = rest.indexOf('\r\n');
    const size = Number.parseInt(rest.slice(0, eol), 16);
    if (size === 0) break;
    frames.push(rest.slice(eol + 2, eol + 2 + size));
    rest = rest.slice(eol + 2 + size + 2);
  }
  // One frame for the burst and the done event together (Node writes nothing before the next tick).
  assert.equal(frames.length, 1, `${frames.length} frames`);
  assert.equal(withoutIds(frames.join('')), `${chunks.map((chunk) => `data: ${chunk}\n\n`).join('')}event: done\ndata: [DONE]\n\n`);
});

test('over HTTP/2 (node:http2\'s compatibility API): no header HTTP/2 forbids, and a cancelled stream cuts its turn', async (t) => {
  const warnings: Error[] = [];
  const onWarning = (warning: Error): void => void warnings.push(warning);
  process.on('warning', onWarning);
  t.after(() => process.off('warning', onWarning));
  const cut = deferred<unknown>();
  const registry = new AgentRegistry();
  registry.register('held-.*', class extends Agent {
    constructor(id: string) {
      super(id, {
        model: scriptedModel(async function* ({ signal }) {
          yield 'first';
          await new Promise((_, reject) => signal.addEventListener('abort', () => {
            cut.resolve(signal.reason);
            reject(signal.reason);
          }));
        }),
      });
    }
  });
  registry.register('.*', class extends Agent {
    constructor(id: string) {
      super(id, { model: echoModel() });
    }
  });
  const server = http2.createServer(new AgentRouter(registry, { logger: { error: () => {} } }).toRequestListener());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const client = http2.connect(`http://127.0.0.1:${(server.address() as { port: number }).port}`);
  t.after(() => new Promise<void>((resolve) => {
    client.close();
    server.close(() => resolve());
  }));
  const request = (path: string, body: string | undefined, type: string | null = 'application/json'): Promise<{ headers: http2.IncomingHttpHeaders; text: string }> => new Promise((resolve, reject) => {
    const stream = client.request({ ':method': 'POST', ':path': path, ...(type === null ? {} : { 'content-type': type }) }, { endStream: body === undefined });
    let headers: http2.IncomingHttpHeaders = {};
    let text = '';
    stream.on('response', (received) => (headers = received));
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => (text += chunk));
    stream.on('end', () => resolve({ headers, text }));
    stream.on('error', reject);
    if (body !== undefined) stream.end(body);
  });
  const json = await request('/h2-1/chat', JSON.stringify({ message: 'over two' }));
  assert.equal(json.headers[':status'], 200);
  assert.deepEqual(noTurnId(JSON.parse(json.text)), { agent_id: 'h2-1', response: 'over two' });
  const sse = await request('/h2-1/chat?stream=true', JSON.stringify({ message: 'over two' }));
  assert.equal(sse.headers['content-type'], 'text/event-stream');
  assert.equal(withoutIds(sse.text), 'data: over\n\ndata:  two\n\nevent: done\ndata: [DONE]\n\n');
  // A client that cancels its stream cuts the turn, as a closed HTTP/1.1 connection does. Node's
  // Http2ServerResponse reports writableFinished once the stream is closed, ended or not, so the
  // router used to take the cancel for a finished answer and let the model run on.
  const held = client.request({ ':method': 'POST', ':path': '/held-1/chat?stream=true', 'content-type': 'application/json' });
  held.end(JSON.stringify({ message: 'x' }));
  await new Promise((resolve) => held.once('data', resolve));
  held.close(http2.constants.NGHTTP2_CANCEL);
  assert.equal((await cut.promise as { code?: string }).code, 'client_closed');
  assert.deepEqual(noTurnId(JSON.parse((await request('/h2-2/chat', JSON.stringify({ message: 'still here' }))).text)), { agent_id: 'h2-2', response: 'still here' });
  // HTTP/2 declares no length and no chunking: a body with no Content-Type is told by the stream going on after the headers.
  const untyped = await request('/h2-3/chat', JSON.stringify({ message: 'untyped' }), null);
  assert.deepEqual([untyped.headers[':status'], JSON.parse(untyped.text).code], [415, 'unsupported_media_type']);
  const empty = await request('/h2-3/chat', undefined, null);
  assert.deepEqual([empty.headers[':status'], JSON.parse(empty.text).code], [400, 'missing_message'], 'no body at all needs no type');
  // A Connection header was dropped by node:http2 with an UnsupportedWarning in the process's output.
  await new Promise(setImmediate);
  assert.deepEqual(warnings.map((warning) => warning.message), []);
});

test('over HTTP/2: router.handle in a host app\'s own node:http2 listener answers the router\'s paths and leaves the others to the host', async (t) => {
  const registry = new AgentRegistry();
  registry.register('.*', class extends Agent {
    constructor(id: string) {
      super(id, { model: echoModel() });
    }
  });
  const router = new AgentRouter(registry, { prefix: '/api' });
  // As a user writes it: no cast, so this file compiling (npm test's tsc) is the check that handle takes HTTP/2's types.
  const server = http2.createServer(async (req, res) => {
    if (await router.handle(req, res)) return;
    res.statusCode = 418;
    res.end('the host app');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const client = http2.connect(`http://127.0.0.1:${(server.address() as { port: number }).port}`);
  t.after(() => new Promise<void>((resolve) => {
    client.close();
    server.close(() => resolve());
  }));
  const request = (method: string, path: string, body?: string): Promise<[unknown, string]> => new Promise((resolve, reject) => {
    const stream = client.request({ ':method': method, ':path': path, 'content-type': 'application/json' }, { endStream: body === undefined });
    let status: unknown;
    let text = '';
    stream.on('response', (headers) => (status = headers[':status']));
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => (text += chunk));
    stream.on('end', () => resolve([status, text]));
    stream.on('error', reject);
    if (body !== undefined) stream.end(body);
  });
  assert.deepEqual(await request('POST', '/api/h2-1/chat?stream=true', '{"message":"both ways"}').then(([status, text]) => [status, withoutIds(text as string)]), [200, 'data: both\n\ndata:  ways\n\nevent: done\ndata: [DONE]\n\n']);
  assert.deepEqual(await request('GET', '/api/h2-1/state'), [200, '{"agent_id":"h2-1","state":{}}']);
  assert.deepEqual(await request('GET', '/elsewhere'), [418, 'the host app']);
});

/** `router` on a node:http2 server without TLS (h2c), and a client session to it; both closed after the test. */
async function h2cClientOf(t: { after: (fn: () => Promise<void> | void) => void }, router: AgentRouter): Promise<http2.ClientHttp2Session> {
  const server = http2.createServer(router.toRequestListener());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const client = http2.connect(`http://127.0.0.1:${(server.address() as { port: number }).port}`);
  t.after(() => new Promise<void>((resolve) => {
    client.destroy();
    server.close(() => resolve());
  }));
  return client;
}

test('over HTTP/2: a client that cancels its stream while an async authorize hook runs starts no turn, as over HTTP/1.1', async (t) => {
  const storage = new MemoryStorage();
  const registry = new AgentRegistry();
  registry.register('.*', counterOn(storage));
  const logged: unknown[] = [];
  const router = new AgentRouter(registry, {
    logger: { error: (_message, error) => void logged.push(error) },
    // Allows, but only once the client has gone.
    authorize: (req) => new Promise<boolean>((resolve) => req.once('close', () => resolve(true))),
  });
  const client = await h2cClientOf(t, router);
  // The generic envelope (its body read before authorize is asked), and chat (its body read after).
  for (const [path, body] of [['/gone-1', { action: 'invoke', payload: { method: 'increment' } }], ['/gone-2/chat', { message: 'hello' }]] as const) {
    const stream = client.request({ ':method': 'POST', ':path': path, 'content-type': 'application/json' });
    stream.on('error', () => {});
    stream.end(JSON.stringify(body));
    await new Promise((resolve) => setTimeout(resolve, 50));
    stream.close(http2.constants.NGHTTP2_CANCEL);
  }
  await new Promise((resolve) => setTimeout(resolve, 200));
  assert.equal(await storage.load('gone-1'), undefined, 'the action ran for a client that had gone before its turn began');
  assert.equal(await storage.load('gone-2'), undefined, 'a chat was stored for a client that had gone');
  assert.deepEqual(logged.map((error) => (error as { code?: string }).code), [], 'logged as a server error');
});

/** An Agent class on `model`, for a registry pattern. */
function agentOn(model: ReturnType<typeof scriptedModel>) {
  return class extends Agent {
    constructor(id: string) {
      super(id, { model });
    }
  };
}

/**
 * A router on node:http2 (h2c) whose registry sends every id through an HTTPTransport to a plain router
 * serving `remoteRegistry`, with a turnTimeout of 0.5 s; `open` starts a stream on one client connection.
 */
async function http2FrontOf(t: { after: (fn: () => Promise<void> | void) => void }, remoteRegistry: AgentRegistry, logger: { error: (message: string, error?: unknown) => void }) {
  const remote = await listen(new AgentRouter(remoteRegistry, { pingInterval: 0 }).toRequestListener());
  t.after(remote.close);
  const registry = new AgentRegistry();
  registry.register('.*', new HTTPTransport(remote.url));
  const router = new AgentRouter(registry, { pingInterval: 0, turnTimeout: 0.5, logger });
  const client = await h2cClientOf(t, router);
  const open = (path: string): http2.ClientHttp2Stream => {
    const stream = client.request({ ':method': 'POST', ':path': path, 'content-type': 'application/json' });
    stream.on('error', () => {});
    stream.end(JSON.stringify({ message: 'go' }));
    return stream;
  };
  return { router, open };
}

test('over HTTP/2: a remote stream whose client stopped reading is cut after turnTimeout, and ends without an error of the router\'s own', async (t) => {
  // The remote: a plain router whose model writes more than the front's client will read.
  const big = 'x'.repeat(16 * 1024);
  const remoteRegistry = new AgentRegistry();
  remoteRegistry.register('.*', agentOn(scriptedModel(async function* ({ signal }) {
    for (let i = 0; i < 400 && !signal.aborted; i++) {
      yield big;
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
  })));
  const logged: unknown[] = [];
  const { router, open } = await http2FrontOf(t, remoteRegistry, { error: (_message, error) => void logged.push(error) });
  const stalled = open('/r-1/chat?stream=true');
  await new Promise((resolve) => stalled.once('data', resolve));
  stalled.pause();
  // Cut once nothing was read for turnTimeout; the remote's stream then ends on a closed HTTP/2 stream.
  while (router.openStreams > 0) await new Promise((resolve) => setTimeout(resolve, 50));
  await new Promise((resolve) => setTimeout(resolve, 200));
  assert.deepEqual(logged.filter((error) => error instanceof TypeError).map(String), []);
});

test('over HTTP/2: a remote stream whose client reads nothing is cut after turnTimeout while another stream on the same connection flows', async (t) => {
  const big = 'x'.repeat(16 * 1024);
  const remoteRegistry = new AgentRegistry();
  // hose-*: more than the client will read; tick-*: a chunk every 50 ms for 3 s.
  remoteRegistry.register('hose-.*', agentOn(scriptedModel(async function* ({ signal }) {
    for (let i = 0; i < 400 && !signal.aborted; i++) yield big;
  })));
  remoteRegistry.register('tick-.*', agentOn(scriptedModel(async function* ({ signal }) {
    for (let i = 0; i < 60 && !signal.aborted; i++) {
      yield `t${i} `;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  })));
  const { router, open } = await http2FrontOf(t, remoteRegistry, { error: () => {} });
  const stalled = open('/hose-1/chat?stream=true');
  await new Promise((resolve) => stalled.once('data', resolve));
  stalled.pause();
  const live = open('/tick-1/chat?stream=true');
  let ticks = '';
  live.setEncoding('utf8');
  live.on('data', (chunk: string) => (ticks += chunk));
  while (!ticks.includes('t1')) await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(router.openStreams, 2);
  const startedAt = Date.now();
  while (router.openStreams > 1 && Date.now() - startedAt < 2500) await new Promise((resolve) => setTimeout(resolve, 50));
  assert.ok(!ticks.includes('event: done'), 'the other stream still flows');
  assert.equal(router.openStreams, 1, 'the stalled stream is still open 2.5 s after its client stopped reading (turnTimeout 0.5 s)');
});

test('over HTTP/2: a client that reads nothing holds a local stream of small chunks at backpressure, not the whole reply in memory', async (t) => {
  // Small chunks, one per macrotask: each goes out in its own write, under the 16 KiB that forces a wait.
  // Node 20's compatibility response has no writableNeedDrain, so every one of them was buffered.
  const total = 20_000;
  let produced = 0;
  const registry = new AgentRegistry();
  registry.register('.*', agentOn(scriptedModel(async function* ({ signal }) {
    while (produced < total && !signal.aborted) {
      produced++;
      yield 'y'.repeat(200);
      await new Promise(setImmediate);
    }
  })));
  const router = new AgentRouter(registry, { pingInterval: 0, turnTimeout: 0.5, logger: { error: () => {} } });
  const client = await h2cClientOf(t, router);
  const stalled = client.request({ ':method': 'POST', ':path': '/deaf-1/chat?stream=true', 'content-type': 'application/json' });
  stalled.on('error', () => {});
  stalled.end(JSON.stringify({ message: 'go' }));
  await new Promise((resolve) => stalled.once('data', resolve));
  stalled.pause();
  // Ended either way: the model ran out, or (waiting for the client) the turn was cut at turnTimeout.
  while (router.openStreams > 0) await new Promise((resolve) => setTimeout(resolve, 50));
  assert.ok(produced < total / 10, `${produced} of ${total} chunks (${produced * 200} bytes) were produced for a client that read one frame`);
});

test('over HTTP/2: a pulled stream (a subclass\'s own stream()) whose client cancels while a write waits for drain ends, and gives its agent back', async (t) => {
  // 40 KiB chunks to a client that reads nothing: the second fills the stream's window and waits for drain.
  const big = 'b'.repeat(40 * 1024);
  class OwnStream extends Agent {
    constructor(id: string) {
      super(id, { model: echoModel() });
    }
    // Ignores its signal, as a wrapper may: what stops it is the router no longer pulling.
    override async *stream(): AsyncGenerator<string> {
      for (let i = 0; i < 10; i++) yield big;
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', OwnStream);
  const router = new AgentRouter(registry, { pingInterval: 0, logger: { error: () => {} } });
  const client = await h2cClientOf(t, router);
  const stream = client.request({ ':method': 'POST', ':path': '/own-1/chat?stream=true', 'content-type': 'application/json' });
  stream.on('error', () => {});
  stream.end(JSON.stringify({ message: 'go' }));
  await new Promise((resolve) => stream.once('data', resolve));
  stream.pause();
  await new Promise((resolve) => setTimeout(resolve, 100));
  stream.close(http2.constants.NGHTTP2_CANCEL);
  const startedAt = Date.now();
  while (router.openStreams > 0 && Date.now() - startedAt < 3000) await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(router.openStreams, 0, 'the stream is still open 3 s after its client cancelled it');
  assert.deepEqual(router.pool?.list().map((agent) => agent.busy), [false], 'the agent is still busy');
});

test('HTTP/1.1 pipelining: a stream queued behind another ends when the client goes, and gives its agent back', async (t) => {
  const held = deferred();
  const big = 'h'.repeat(20 * 1024);
  // "hold": one chunk, then waits (the stream ahead); "hose": more than the socket takes unread (the queued one).
  const { url, router } = await serve(t, async function* ({ messages }) {
    if (messages.at(-1)?.content === 'hold') {
      yield 'first';
      await held.promise;
      return;
    }
    for (let i = 0; i < 50; i++) yield big;
  });
  t.after(() => held.resolve());
  const socket = rawSocket(t, Number(new URL(url).port));
  socket.write(rawChatPost('/held-1/chat?stream=true', 'hold') + rawChatPost('/hose-1/chat?stream=true', 'hose'));
  while (router.openStreams < 2) await new Promise((resolve) => setTimeout(resolve, 20));
  socket.destroy();
  await pollUntil(() => router.openStreams === 0, 3000);
  // Node gives a response queued behind another no 'close' when the connection goes: it was held until turnTimeout (300 s).
  assert.equal(router.openStreams, 0, 'a stream is still open 3 s after its client left');
  assert.deepEqual(router.pool?.list().map((agent) => agent.busy), [false, false]);
});

test('HTTP/1.1 pipelining: a remote stream queued behind another, cut for its stall while queued, still ends when the connection goes', async (t) => {
  // The remote: `hold-` says one word and then waits (the stream ahead: silent, so its writer times no stall);
  // `hose-` writes more than a queued response holds before it must wait for drain (the stream queued).
  const held = deferred();
  t.after(() => held.resolve());
  const big = 'b'.repeat(40 * 1024);
  const remoteRegistry = new AgentRegistry();
  remoteRegistry.register('hold-.*', agentOn(scriptedModel(async function* ({ signal }) {
    yield 'first';
    await Promise.race([held.promise, new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))]);
  })));
  remoteRegistry.register('hose-.*', agentOn(scriptedModel(async function* ({ signal }) {
    for (let i = 0; i < 50 && !signal.aborted; i++) yield big;
  })));
  const remote = await listen(new AgentRouter(remoteRegistry, { pingInterval: 0 }).toRequestListener());
  t.after(remote.close);
  const registry = new AgentRegistry();
  registry.register('.*', new HTTPTransport(remote.url));
  // A remote's turn is not timed here: only the stall cut (turnTimeout without a byte read) and the client leaving end it.
  const router = new AgentRouter(registry, { pingInterval: 0, turnTimeout: 0.5, logger: { error: () => {} } });
  const listener = router.toRequestListener();
  const responses: http.ServerResponse[] = [];
  const front = await listen((req, res) => {
    responses.push(res);
    listener(req, res);
  });
  t.after(front.close);
  const socket = rawSocket(t, front.port);
  socket.write(rawChatPost('/hold-1/chat?stream=true') + rawChatPost('/hose-1/chat?stream=true'));
  while (router.openStreams < 2) await new Promise((resolve) => setTimeout(resolve, 20));
  // No byte moves on the connection (the stream ahead is silent), so the queued one is cut for its stall, while still
  // queued: destroyed, with no socket, and no 'close' from Node.
  const queued = responses[1] as http.ServerResponse;
  await pollUntil(() => queued.destroyed, 5000);
  assert.equal(queued.destroyed, true, 'the queued stream was not cut for its stall');
  assert.equal(queued.socket, null, 'the stream was cut once it had the connection, not while queued');
  // Then the client goes: the queued stream ends with its connection.
  socket.destroy();
  await pollUntil(() => router.openStreams === 0, 5000);
  assert.equal(router.openStreams, 0, 'a stream is still open 5 s after its connection was cut');
});

test('HTTP/1.1 pipelining: a response queued when the connection goes is closed once, and reads closed, as Node\'s own', async (t) => {
  const held = deferred();
  t.after(() => held.resolve());
  const { router } = await serve(t, async function* () {
    yield 'first';
    await held.promise;
  });
  const listener = router.toRequestListener();
  const closes: number[] = [];
  const responses: http.ServerResponse[] = [];
  const front = await listen((req, res) => {
    const index = closes.push(0) - 1;
    responses.push(res);
    res.on('close', () => (closes[index] = (closes[index] ?? 0) + 1));
    // What newer Node does for each response still queued when its connection goes (registered before any other
    // listener, as Node's own is): destroys it and, having no socket, emits its 'close' a tick later, unless closed.
    if (res.socket === null) {
      req.socket.once('close', () => {
        res.destroy();
        process.nextTick(() => {
          if (res.closed) return;
          res.destroyed = true;
          (res as unknown as { _closed: boolean })._closed = true;
          res.emit('close');
        });
      });
    }
    listener(req, res);
  });
  t.after(front.close);
  const socket = rawSocket(t, front.port);
  socket.write(rawChatPost('/ahead-1/chat?stream=true') + rawChatPost('/queued-1/chat?stream=true'));
  while (router.openStreams < 2) await new Promise((resolve) => setTimeout(resolve, 20));
  socket.destroy();
  await pollUntil(() => router.openStreams === 0, 3000);
  await new Promise(setImmediate);
  assert.equal(router.openStreams, 0);
  assert.deepEqual(closes, [1, 1], "each response's 'close' came once");
  assert.deepEqual(responses.map((res) => res.closed), [true, true]);
});

test('HTTP/1.1 pipelining: a stream queued behind a long remote stream its client reads is not cut as stalled', async (t) => {
  // The remote talks for about 1.5 s, three times the front's turnTimeout (a remote's turn is not timed there).
  const remoteRegistry = new AgentRegistry();
  remoteRegistry.register('.*', agentOn(scriptedModel(async function* () {
    for (let i = 0; i < 30; i++) {
      yield `r${i} `;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  })));
  const remote = await listen(new AgentRouter(remoteRegistry, { pingInterval: 0 }).toRequestListener());
  t.after(remote.close);
  const registry = new AgentRegistry();
  registry.register('remote-.*', new HTTPTransport(remote.url));
  registry.register('.*', agentOn(scriptedModel(['queued reply'])));
  const router = new AgentRouter(registry, { pingInterval: 0, turnTimeout: 0.5, logger: { error: () => {} } });
  const front = await listen(router.toRequestListener());
  t.after(front.close);
  const socket = rawSocket(t, front.port);
  let text = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => (text += chunk));
  const closed = new Promise((resolve) => socket.once('close', resolve));
  socket.write(rawChatPost('/remote-1/chat?stream=true') + rawChatPost('/local-1/chat?stream=true'));
  // Both answered (two done events), the connection cut, or 5 s.
  let settled = false;
  void closed.then(() => (settled = true));
  await pollUntil(() => settled || text.split('event: done').length >= 3, 5000);
  assert.ok(text.includes('r29 '), 'the remote stream was not read whole');
  // Its response waited behind the first, sending nothing: the stall check counted that as a client reading nothing.
  assert.ok(text.includes('data: queued reply'), 'the queued stream was cut as stalled while its client read the one ahead');
});

test('HTTP/1.1 pipelining: 300 requests in one write are all answered, with no listener warning for the ones queued', async (t) => {
  const warnings: Error[] = [];
  const onWarning = (warning: Error): void => void warnings.push(warning);
  process.on('warning', onWarning);
  t.after(() => process.off('warning', onWarning));
  const { url } = await serve(t, null);
  const socket = rawSocket(t, Number(new URL(url).port));
  // Counted over all that came: a status line may arrive split across two reads.
  let received = '';
  const answers = (): number => received.split('HTTP/1.1 200 OK').length - 1;
  socket.setEncoding('latin1');
  socket.on('data', (text: string) => (received += text));
  socket.write('GET /pipelined-1/state HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(300));
  while (answers() < 300) await new Promise((resolve) => setTimeout(resolve, 20));
  await new Promise(setImmediate);
  assert.deepEqual(warnings.map((warning) => warning.name), []);
});

test('stream=events: typed frames whose event name equals their type', async (t) => {
  const { url } = await serve(t, null);
  const { events } = await collectSSE(await streamChat(`${url}/typed/chat`, 'a b', { query: '?stream=events' }));
  const frames = events.map((e) => ({ event: e.event, payload: JSON.parse(e.data) }));
  for (const frame of frames) assert.equal(frame.payload.type, frame.event);
  assert.deepEqual(frames.map((f) => f.event), ['turn.started', 'text.delta', 'text.delta', 'turn.finished']);
  assert.deepEqual(frames[3]?.payload.result, { agent_id: 'typed', text: 'a b' });
});

test('a reply the provider cut short says truncated in the JSON reply, the envelope and turn.finished, and in history; plain SSE ends as usual', async (t) => {
  const bot = new Agent('bot', {
    model: scriptedModel((request) => {
      const message = request.messages.at(-1)?.content ?? '';
      // Usage and the mark in one record, or a model saying `truncated: false` of a whole reply.
      return message.startsWith('long') ? [message, { usage: { outputTokens: 2 }, truncated: true }] : [message, { truncated: false }];
    }),
  });
  const { url, close } = await listen(new AgentRouter(bot, { logger: { error: () => {} } }).toRequestListener());
  t.after(close);

  assert.deepEqual(noTurnId((await postJson(`${url}/chat`, { message: 'long one' })).body), { agent_id: 'bot', response: 'long one', truncated: true });
  assert.deepEqual(noTurnId((await postJson(`${url}/chat`, { message: 'short' })).body), { agent_id: 'bot', response: 'short' }, 'no field on a whole reply');
  assert.deepEqual(noTurnId((await postJson(`${url}/`, { action: 'chat', message: 'long two' })).body), { agent_id: 'bot', response: 'long two', truncated: true });

  const typed = await collectSSE(await streamChat(`${url}/chat`, 'long three', { query: '?stream=events' }));
  assert.deepEqual(JSON.parse(typed.events.at(-1)?.data ?? ''), { type: 'turn.finished', result: { agent_id: 'bot', text: 'long three', truncated: true } });
  const whole = await collectSSE(await streamChat(`${url}/chat`, 'short again', { query: '?stream=events' }));
  assert.deepEqual(JSON.parse(whole.events.at(-1)?.data ?? ''), { type: 'turn.finished', result: { agent_id: 'bot', text: 'short again' } });
  const plain = await collectSSE(await streamChat(`${url}/chat`, 'long four'));
  assert.deepEqual(plain.events.map((e) => [e.event, e.data]), [['message', 'long four'], ['done', '[DONE]']]);

  assert.deepEqual(
    bot.messages.filter((m) => m.role === 'assistant').map((m) => [m.content, m.truncated, m.usage?.outputTokens]),
    [['long one', true, 2], ['short', undefined, undefined], ['long two', true, 2], ['long three', true, 2], ['short again', undefined, undefined], ['long four', true, 2]],
  );
});

test('stream=events ends with turn.failed on a model error', async (t) => {
  const { url } = await serve(t, () => {
    throw new Error('nope');
  });
  const { events } = await collectSSE(await streamChat(`${url}/typed/chat`, 'x', { query: '?stream=events' }));
  assert.deepEqual(events.map((e) => e.event), ['turn.started', 'turn.failed']);
  assert.deepEqual(JSON.parse(events[1]?.data ?? ''), { type: 'turn.failed', error: 'Internal error', code: 'internal_error' });
});

test('a model yielding a non-string chunk fails that turn only', async (t) => {
  let turn = 0;
  const { url } = await serve(t, () => (turn++ === 0 ? [42 as unknown as string][Symbol.iterator]() : 'fine'));
  const bad = await postJson(`${url}/n/chat`, { message: 'x' });
  assert.equal(bad.status, 500);
  assert.equal((await postJson(`${url}/n/chat`, { message: 'x' })).body.response, 'fine');
});

/** A raw connection to the server on `port`, destroyed after the test; a reset it sees once cut is expected. */
function rawSocket(t: TestContext, port: number): net.Socket {
  const socket = net.connect(port, '127.0.0.1');
  t.after(() => socket.destroy());
  socket.on('error', () => {});
  return socket;
}
