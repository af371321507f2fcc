import assert from 'node:assert/strict';
import { inspect } from 'node:util';
import test, { type TestContext } from 'node:test';
import { AgentRouterError, UpstreamError } from '../../src/errors.ts';
import { HTTPTransport, type FetchLike } from '../../src/transports/http.ts';
import { remoteURLBuilder } from '../../src/transports/remote-url.ts';
import { Slots } from '../../src/transports/slots.ts';
import { Watchdog } from '../../src/transports/watchdog.ts';

// No sockets here: HTTPTransport takes its fetch as an option, and these
// tests hand it one whose response bodies they feed by hand.

const encoder = new TextEncoder();
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * A response body the test writes into. `pulled()` resolves once the reader
 * is waiting for more (high-water mark 0: `pull` runs only on a pending
 * read), which tells the test that everything sent so far was consumed.
 */
function handFedBody() {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  let onPull: (() => void) | undefined;
  let pulls = 0;
  let seen = 0;
  const stream = new ReadableStream<Uint8Array>(
    {
      start: (c) => void (controller = c),
      pull: () => {
        pulls++;
        onPull?.();
      },
    },
    { highWaterMark: 0 },
  );
  return {
    stream,
    send: (text: string) => controller.enqueue(encoder.encode(text)),
    end: () => controller.close(),
    pulled: async () => {
      while (pulls === seen) await new Promise<void>((resolve) => (onPull = resolve));
      seen = pulls;
    },
  };
}

/** A fetch that answers every call with `respond(call)`, recording the calls. */
function fakeFetch(respond: (url: URL, init: RequestInit) => Response | Promise<Response>) {
  const calls: Array<{ url: URL; init: RequestInit }> = [];
  const fetch: FetchLike = async (url, init) => {
    calls.push({ url, init });
    return respond(url, init);
  };
  return { fetch, calls };
}

/** A fetch that never answers, but rejects with the abort reason, like the real one. */
function silentFetch() {
  return fakeFetch((_url, init) => new Promise<Response>((_resolve, reject) => {
    if (init.signal?.aborted === true) reject(init.signal.reason);
    init.signal?.addEventListener('abort', () => reject(init.signal?.reason));
  }));
}

const sse = (body: ReadableStream<Uint8Array> | string) => new Response(body, { headers: { 'content-type': 'text/event-stream' } });
const jsonResponse = (status: number, body: unknown, headers: Record<string, string> = {}) =>
  new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json', ...headers } });

/** Mock setTimeout and performance.now together, so time moves only when the test says. */
function mockClock(t: TestContext): (ms: number) => void {
  let now = 0;
  t.mock.method(performance, 'now', () => now);
  t.mock.timers.enable({ apis: ['setTimeout'] });
  return (ms) => {
    now += ms;
    t.mock.timers.tick(ms);
  };
}

const isUpstream = (status: number, code: string) => (error: unknown): boolean =>
  error instanceof UpstreamError && error.status === status && error.code === code;

test('a long stream that keeps sending (pings included) is never cut; silence past the timeout is a 504', async (t) => {
  const advance = mockClock(t);
  const body = handFedBody();
  const transport = new HTTPTransport('http://remote.test/agent', { timeout: 1, fetch: fakeFetch(() => sse(body.stream)).fetch });
  const stream = transport.stream('bot-1', 'hi');
  await stream.ready;
  const iterator = stream[Symbol.asyncIterator]();
  const first = iterator.next();
  await body.pulled();
  body.send('data: one\n\n');
  assert.deepEqual(await first, { value: 'one', done: false });

  // Ten seconds in all, never more than 0.9 s without a byte.
  const second = iterator.next();
  for (let i = 0; i < 10; i++) {
    await body.pulled();
    advance(900);
    body.send(i % 2 === 0 ? ': ping\n\n' : ': pi'); // half a comment line is progress too
  }
  await body.pulled();
  body.send('ng\n\ndata: two\n\n');
  assert.deepEqual(await second, { value: 'two', done: false });

  const third = iterator.next();
  await body.pulled();
  advance(1000);
  await assert.rejects(third, isUpstream(504, 'upstream_timeout'));
});

test('a consumer holding a chunk longer than the timeout is not mistaken for a silent remote', async (t) => {
  const advance = mockClock(t);
  const body = handFedBody();
  const transport = new HTTPTransport('http://remote.test/agent', { timeout: 1, fetch: fakeFetch(() => sse(body.stream)).fetch });
  const iterator = transport.stream('bot-1', 'hi')[Symbol.asyncIterator]();
  const first = iterator.next();
  await body.pulled();
  body.send('data: one\n\n');
  assert.equal((await first).value, 'one');
  advance(5000); // the consumer is busy elsewhere
  const second = iterator.next();
  await body.pulled();
  body.send('data: two\n\nevent: done\ndata: [DONE]\n\n');
  assert.equal((await second).value, 'two');
  const end = iterator.next();
  await body.pulled(); // past done, the rest is read so the connection can be reused
  body.end();
  assert.equal((await end).done, true);
});

test('the timeout covers the wait for response headers; the caller signal wins over it', async (t) => {
  const advance = mockClock(t);
  const transport = new HTTPTransport('http://remote.test/agent', { timeout: 2, fetch: silentFetch().fetch });
  const chat = transport.chat('bot-1', 'hi');
  await nextTurn();
  advance(1999);
  advance(1);
  await assert.rejects(chat, isUpstream(504, 'upstream_timeout'));

  const controller = new AbortController();
  const reason = new AgentRouterError(499, 'client_closed', 'Client closed the connection');
  const state = transport.state('bot-1', { signal: controller.signal });
  controller.abort(reason);
  await assert.rejects(state, (error) => error === reason);
});

test('a JSON body that trickles in slowly but steadily is read whole', async (t) => {
  const advance = mockClock(t);
  const body = handFedBody();
  const transport = new HTTPTransport('http://remote.test/agent', {
    timeout: 1,
    fetch: fakeFetch(() => new Response(body.stream, { headers: { 'content-type': 'application/json' } })).fetch,
  });
  const reply = transport.chat('bot-1', 'hi');
  for (const piece of ['{"agent_id":"bot-1",', '"response":', '"slow but ', 'steady"}']) {
    await body.pulled();
    advance(900);
    body.send(piece);
  }
  await body.pulled();
  body.end();
  assert.equal(await reply, 'slow but steady');
});

test('maxConnections: only that many requests are in flight; queued ones start as others finish, or leave on abort', async () => {
  const answers: Array<(response: Response) => void> = [];
  const { fetch, calls } = fakeFetch(() => new Promise<Response>((resolve) => answers.push(resolve)));
  const transport = new HTTPTransport('http://remote.test/agent', { maxConnections: 2, fetch });
  const controller = new AbortController();
  const reason = new Error('gave up waiting');
  const first = transport.chat('a', '1');
  const second = transport.chat('b', '2');
  const queuedThenAborted = transport.chat('c', '3', { signal: controller.signal });
  const fourth = transport.chat('d', '4');
  await nextTurn();
  assert.equal(calls.length, 2);
  controller.abort(reason);
  await assert.rejects(queuedThenAborted, (error) => error === reason);
  answers.shift()?.(jsonResponse(200, { response: 'one' }));
  assert.equal(await first, 'one');
  await nextTurn();
  assert.deepEqual(calls.map((call) => call.url.pathname), ['/agent/a/chat', '/agent/b/chat', '/agent/d/chat']);
  for (const answer of answers.splice(0)) answer(jsonResponse(200, { response: 'later' }));
  assert.deepEqual(await Promise.all([second, fourth]), ['later', 'later']);
});

test('a timeout longer than setTimeout can hold (2^31-1 ms) fires on time, not after 1 ms', (t) => {
  const advance = mockClock(t);
  let fired = 0;
  const watchdog = new Watchdog(3e9, () => fired++);
  advance(2 ** 31);
  assert.equal(fired, 0);
  advance(3e9 - 2 ** 31 - 1);
  assert.equal(fired, 0);
  advance(1);
  assert.equal(fired, 1);
  watchdog.stop();
});

test('Slots hands a freed slot to the longest waiter', async () => {
  const slots = new Slots(1);
  const signal = new AbortController().signal;
  const order: string[] = [];
  await slots.acquire(signal);
  const a = slots.acquire(signal).then(() => order.push('a'));
  const b = slots.acquire(signal).then(() => order.push('b'));
  assert.equal(slots.waiting, 2);
  slots.release();
  await a;
  slots.release();
  await b;
  assert.deepEqual(order, ['a', 'b']);
  slots.release();
  await slots.acquire(signal); // freed again, so no wait
  await assert.rejects(slots.acquire(AbortSignal.abort(new Error('late'))), /late/);
});

test('the request carries redirect: "manual", the method, JSON body and headers it should', async () => {
  const { fetch, calls } = fakeFetch(() => jsonResponse(200, { agent_id: 'x', result: 3 }));
  const transport = new HTTPTransport('http://remote.test/agent', { fetch, headers: [['X-Api-Key', 'k']] });
  assert.equal(await transport.invoke('x', 'add', [1, 2], { requestId: 'bad id with spaces' }), 3);
  const [call] = calls;
  assert.equal(call?.init.redirect, 'manual');
  assert.equal(call?.init.method, 'POST');
  assert.equal(call?.init.body, '{"method":"add","params":[1,2]}');
  const headers = new Headers(call?.init.headers);
  assert.deepEqual([...headers.keys()].sort(), ['accept', 'content-type', 'x-api-key', 'x-request-id']);
  assert.notEqual(headers.get('x-request-id'), 'bad id with spaces', 'an unsafe request id is replaced');
});

test('SSE edge cases: events after done are ignored, a long tail is dropped, errors are relayed safely', async () => {
  const bodies: Record<string, string> = {
    tail: `data: a\n\nevent: done\ndata: [DONE]\n\ndata: ignored\n\n: ${'x'.repeat(100_000)}\n\n`,
    seed: 'event: error\ndata: "model exploded"\n\n', // ai-query's Python server's format: a JSON string
    junk: 'event: error\ndata: <html>\n\n',
    code: 'event: error\ndata: {"error": "Nope", "code": "Not A Code!"}\n\n',
    cancelled: 'event: error\ndata: {"error": "Turn was cancelled", "code": "cancelled"}\n\n',
    timeout: 'event: error\ndata: {"error": "Turn timed out", "code": "turn_timeout"}\n\n',
    storage: 'event: error\ndata: {"error": "Storage is unavailable; retry shortly", "code": "storage_unavailable"}\n\n',
    huge: `data: ${'y'.repeat(2000)}\n\n`,
  };
  const { fetch } = fakeFetch((url) => sse(bodies[url.pathname.split('/')[2] ?? ''] ?? ''));
  const transport = new HTTPTransport('http://remote.test/agent', { fetch, maxResponseSize: 1024 });
  const chunks: string[] = [];
  for await (const chunk of transport.stream('tail', 'x')) chunks.push(chunk);
  assert.deepEqual(chunks, ['a']);
  const relayed = (code: string, message: string | RegExp) => (error: unknown): boolean => {
    assert.ok(error instanceof UpstreamError);
    assert.equal(error.code, code);
    // A message the remote sent is relayed naming its origin.
    assert.match(error.message, typeof message === 'string' ? new RegExp(`^${message} \\(from the remote agent server at http://remote\\.test\\)$`) : message);
    return true;
  };
  const drain = async (id: string) => {
    for await (const _chunk of transport.stream(id, 'x'));
  };
  await assert.rejects(drain('seed'), relayed('upstream_stream_error', 'model exploded'));
  await assert.rejects(drain('junk'), relayed('upstream_stream_error', /the stream from http:\/\/remote\.test\/agent\/junk\/chat failed/));
  await assert.rejects(drain('code'), relayed('upstream_stream_error', 'Nope'));
  // The status follows the code where our routers answer it with another than 502: a cut or a timeout there is no broken hop.
  const status = async (id: string) => drain(id).then(() => 0, (error: unknown) => (error as UpstreamError).status);
  assert.deepEqual([await status('seed'), await status('cancelled'), await status('timeout'), await status('storage')], [502, 409, 504, 503]);
  await assert.rejects(drain('huge'), relayed('upstream_bad_response', /larger than 1024/));
});

test('after done the rest is read (connection reuse), a long or broken tail is dropped quietly', async () => {
  const pieces = (texts: string[], fail?: Error) =>
    new ReadableStream<Uint8Array>({
      pull(controller) {
        const next = texts.shift();
        if (next !== undefined) controller.enqueue(encoder.encode(next));
        else if (fail !== undefined) controller.error(fail);
        else controller.close();
      },
    });
  const tails: Record<string, () => ReadableStream<Uint8Array>> = {
    long: () => pieces(['data: a\n\nevent: done\ndata: [DONE]\n\n', ...Array.from({ length: 5 }, () => `: ${'x'.repeat(30_000)}\n\n`)]),
    broken: () => pieces(['data: a\n\nevent: done\ndata: [DONE]\n\n', ': tail\n\n'], new Error('reset after done')),
  };
  const { fetch } = fakeFetch((url) => sse((tails[url.pathname.split('/')[2] ?? ''] as () => ReadableStream<Uint8Array>)()));
  const transport = new HTTPTransport('http://remote.test/agent', { fetch });
  for (const id of ['long', 'broken']) {
    const chunks: string[] = [];
    for await (const chunk of transport.stream(id, 'x')) chunks.push(chunk);
    assert.deepEqual(chunks, ['a'], id);
  }
});

test('relayed 4xx codes must look like codes; bodies and non-2xx oddities are 502', async () => {
  const replies: Record<string, () => Response> = {
    badcode: () => jsonResponse(409, { error: 'Conflict', code: 'Not A Code!' }),
    empty: () => new Response(null, { status: 204 }),
    bodiless: () => new Response(null, { status: 200, headers: { 'content-type': 'text/event-stream' } }),
    retry: () => jsonResponse(429, { error: 'Busy', code: 'busy' }, { 'retry-after': 'Wed, 21 Oct 2015 07:28:00 GMT' }),
  };
  const { fetch } = fakeFetch((url) => (replies[url.pathname.split('/')[2] ?? ''] as () => Response)());
  const transport = new HTTPTransport('http://remote.test/agent', { fetch });
  await assert.rejects(transport.chat('badcode', 'x'), (error) => error instanceof UpstreamError && error.status === 409 && error.code === 'upstream_error');
  await assert.rejects(transport.chat('empty', 'x'), isUpstream(502, 'upstream_bad_response'));
  await assert.rejects(transport.stream('bodiless', 'x').ready, isUpstream(502, 'upstream_bad_response'));
  await assert.rejects(transport.chat('retry', 'x'), (error) => error instanceof UpstreamError && error.status === 429 && error.headers?.['Retry-After'] === undefined);
});

test('misuse is refused with errors that say what to do, never quoting a secret', async () => {
  assert.throws(() => new HTTPTransport('not a url'), /absolute http\(s\) URL/);
  assert.throws(() => new HTTPTransport('ftp://host/agent'), /http: or https:/);
  assert.throws(() => new HTTPTransport('http://user:pass@host/agent'), /pass them as headers/);
  assert.throws(() => new HTTPTransport('http://{agent_id}.internal/agent'), /path or query/);
  assert.throws(() => new HTTPTransport('http://host/a', { timeout: 0 }), /seconds/);
  // A per-call option given to the constructor says where it belongs.
  assert.throws(() => new HTTPTransport('http://host/a', { whenBusy: 'reject' } as never), /whenBusy is an option of each call, not of the transport: remote\.chat\(id, message, \{ whenBusy \}\)/);
  assert.doesNotThrow(() => new HTTPTransport('http://host/a', { onDisconnect: undefined } as never));
  assert.throws(() => new HTTPTransport('http://host/a', { timeout: -1 }), /seconds/);
  assert.throws(() => new HTTPTransport('http://host/a', { maxConnections: 1.5 }), /maxConnections/);
  assert.throws(() => new HTTPTransport('http://host/a', { maxResponseSize: 0 }), /maxResponseSize/);
  assert.throws(() => new HTTPTransport('http://host/a', { fetch: 'fetch' as unknown as FetchLike }), /fetch must be a function/);
  assert.throws(
    () => new HTTPTransport('http://host/a', { headers: { Authorization: 'Bearer s3cret\nx: y' } }),
    (error: Error) => error instanceof TypeError && /invalid header/.test(error.message) && !error.message.includes('s3cret'),
  );
  new HTTPTransport('http://host/a', { timeout: Infinity, maxConnections: Infinity });

  const transport = new HTTPTransport('http://host/a', { headers: { Authorization: 'Bearer s3cret' }, fetch: silentFetch().fetch });
  assert.ok(!inspect(transport, { showHidden: true, depth: 5 }).includes('s3cret'), 'inspecting a transport does not show its credentials');
  await assert.rejects(transport.chat('x', 42 as unknown as string), TypeError);
  await assert.rejects(transport.stream('x', 42 as unknown as string).ready, TypeError);
  await assert.rejects(async () => {
    for await (const _chunk of transport.stream('..', 'x'));
  }, (error) => error instanceof AgentRouterError && error.status === 400, 'iterating a stream that never started throws why');
  await assert.rejects(transport.invoke('x', ''), TypeError);
});

test('remoteURLBuilder: base path kept, trailing slashes dropped, {agent_id} substituted everywhere it appears', () => {
  assert.equal(remoteURLBuilder('http://h/agent//')('a b', '/chat').href, 'http://h/agent/a%20b/chat');
  assert.equal(remoteURLBuilder('http://h')('x', '/state').href, 'http://h/x/state');
  assert.equal(remoteURLBuilder(new URL('http://h/agent?k=1#frag'))('x', '/chat', true).href, 'http://h/agent/x/chat?k=1&stream=true');
  assert.equal(remoteURLBuilder('https://h/{agent_id}/x?for={agent_id}')('a&b', '/invoke').href, 'https://h/a%26b/x/invoke?for=a%26b');
  // Turn policies are added as stream is: the url's own query reaches the remote as written.
  assert.equal(remoteURLBuilder('http://h/agent?sig=a~b%20c')('x', '/chat', 'events', { when_busy: 'reject', on_disconnect: 'continue' }).href, 'http://h/agent/x/chat?sig=a~b%20c&stream=events&when_busy=reject&on_disconnect=continue');
  assert.equal(remoteURLBuilder('http://h/agent?when_busy=enqueue')('x', '/chat', false, { when_busy: 'reject' }).href, 'http://h/agent/x/chat?when_busy=reject');
});
