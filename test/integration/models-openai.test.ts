import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import test from 'node:test';
import { brotliCompressSync, gzipSync } from 'node:zlib';
import { openAIModel } from '../../src/models/openai.ts';
import { listen } from '../helpers/listen.ts';
import { shortUndiciTimeouts, undiciFetch } from '../helpers/undici.ts';
import {
  closedPortURL,
  collect,
  fakeProvider,
  fixture,
  manualClock,
  providerError,
  SPLITS,
  splittingFetch,
} from './models-fake-provider.ts';

const API_KEY = 'sk-test-0123456789abcdefSECRET';
const STREAM = fixture('openai-stream.sse');
const ERRORS = JSON.parse(fixture('openai-errors.json')) as Record<string, unknown>;
const TEXT = 'Hello! How can I help you today?';
/** The documented stream cut after its first `data:` events, for mid-stream failures. */
const FIRST_EVENTS = STREAM.split('\n\n').slice(0, 2).join('\n\n') + '\n\n';

const model = (url: string, extra: Partial<Parameters<typeof openAIModel>[0]> = {}) =>
  openAIModel({ model: 'gpt-4o-mini', apiKey: API_KEY, baseURL: `${url}/v1/`, maxRetries: 0, ...extra });

test('assembles the documented stream from LF, CRLF and CR variants split mid-line', async (t) => {
  const variants = { LF: STREAM, CRLF: STREAM.replaceAll('\n', '\r\n'), CR: STREAM.replaceAll('\n', '\r') };
  for (const [name, body] of Object.entries(variants)) {
    const fake = await fakeProvider(t, () => ({ body, pieces: SPLITS }));
    for (const fetch of [globalThis.fetch, splittingFetch(SPLITS)]) {
      const outcome = await collect(model(fake.url, { fetch }));
      assert.equal(outcome.error, undefined, name);
      assert.deepEqual(outcome.chunks, ['Hello', '!', ' How', ' can', ' I', ' help', ' you', ' today', '?'], name);
      assert.deepEqual(outcome.usage, { inputTokens: 9, outputTokens: 10, totalTokens: 19 }, name);
      assert.equal(outcome.truncated, false, name);
    }
  }
});

test('a reply stopped at max_tokens (finish_reason "length") is kept and marked truncated', async (t) => {
  const body = STREAM.replace('"finish_reason":"stop"', '"finish_reason":"length"');
  assert.notEqual(body, STREAM);
  const fake = await fakeProvider(t, () => ({ body }));
  const outcome = await collect(model(fake.url));
  assert.equal(outcome.error, undefined);
  assert.equal(outcome.chunks.join(''), TEXT);
  assert.equal(outcome.truncated, true);
  assert.deepEqual(outcome.usage, { inputTokens: 9, outputTokens: 10, totalTokens: 19 });
});

test('keeps UTF-8 intact when a character is split between pieces', async (t) => {
  const text = 'Grüße 👋 — ça va?';
  const body = `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: text }, finish_reason: 'stop' }] })}\n\ndata: [DONE]\n\n`;
  const fake = await fakeProvider(t, () => ({ body, pieces: [1] }));
  const outcome = await collect(model(fake.url, { fetch: splittingFetch([1, 2]) }));
  assert.deepEqual(outcome.chunks, [text]);
  assert.equal(outcome.usage, undefined);
});

test('sends the system prompt first, then the history and the new message, with stream options', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: STREAM }));
  await collect(model(fake.url, { body: { temperature: 0.2 } }), {
    system: 'You are terse.',
    messages: [
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello.', usage: { inputTokens: 1 } },
      { role: 'user', content: 'How are you?' },
    ],
  });
  const [request] = fake.requests;
  assert.equal(request?.method, 'POST');
  assert.equal(request?.url, '/v1/chat/completions');
  assert.deepEqual(request?.body, {
    temperature: 0.2,
    model: 'gpt-4o-mini',
    messages: [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello.' },
      { role: 'user', content: 'How are you?' },
    ],
    stream: true,
    stream_options: { include_usage: true },
  });
});

test('sends no system message without a system prompt, and no Authorization without a key', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: STREAM }));
  await collect(openAIModel({ model: 'llama3.2', baseURL: `${fake.url}/v1` }));
  const [request] = fake.requests;
  assert.deepEqual(request?.body['messages'], [{ role: 'user', content: 'Hello' }]);
  assert.equal(request?.headers.authorization, undefined);
});

test('body can drop stream_options for servers that refuse the field, but cannot replace model, messages or stream', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: STREAM }));
  await collect(openAIModel({ model: 'mistral-small', baseURL: `${fake.url}/v1`, body: { stream_options: undefined, temperature: 0, stream: false, model: 'other' } }));
  const body = fake.requests[0]?.body as Record<string, unknown>;
  assert.equal('stream_options' in body, false);
  assert.equal(body['temperature'], 0);
  assert.equal(body['stream'], true);
  assert.equal(body['model'], 'mistral-small');
});

test("sends the bearer key, JSON and SSE headers, and the caller's extra headers", async (t) => {
  const fake = await fakeProvider(t, () => ({ body: STREAM }));
  await collect(model(fake.url, { headers: { 'OpenAI-Organization': 'org-abc' } }));
  const headers = fake.requests[0]?.headers;
  assert.equal(headers?.authorization, `Bearer ${API_KEY}`);
  assert.equal(headers?.['content-type'], 'application/json');
  assert.equal(headers?.accept, 'text/event-stream');
  assert.equal(headers?.['openai-organization'], 'org-abc');
});

test('maps each documented HTTP error to a typed error that carries the status, never the key', async (t) => {
  const cases = [
    [401, 'model_auth_failed', 'invalid_request_error'],
    [403, 'model_auth_failed', 'request_forbidden'],
    [404, 'model_not_found', 'invalid_request_error'],
    [429, 'model_rate_limited', 'requests'],
    [500, 'model_unavailable', 'server_error'],
  ] as const;
  for (const [status, code, type] of cases) {
    const fake = await fakeProvider(t, (_, request) => ({
      status,
      headers: { 'content-type': 'application/json' },
      // OpenAI echoes the key it got in its 401 message.
      body: JSON.stringify(ERRORS[status]).replace('{{apiKey}}', String(request.headers.authorization).slice(7)),
    }));
    const error = providerError(await collect(model(fake.url)), code);
    assert.equal(error.status, 502);
    assert.equal(error.providerStatus, status);
    assert.equal(error.providerType, type);
    assert.equal(error.provider, 'openai');
    assert.match(error.message, new RegExp(`HTTP ${status}`));
    assert.ok(!error.message.includes(API_KEY) && !error.message.includes('SECRET'), error.message);
    assert.equal(fake.requests.length, 1);
  }
});

test('does not retry a 401 even with retries left', async (t) => {
  const fake = await fakeProvider(t, () => ({ status: 401, body: JSON.stringify(ERRORS['401']) }));
  providerError(await collect(model(fake.url, { maxRetries: 2 })), 'model_auth_failed');
  assert.equal(fake.requests.length, 1);
});

test('an error event after the first chunk fails the turn with the provider message, without a retry', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: fixture('openai-stream-error.sse'), pieces: SPLITS }));
  const outcome = await collect(model(fake.url, { maxRetries: 2 }));
  const error = providerError(outcome, 'model_stream_error');
  assert.deepEqual(outcome.chunks, ['Hello', '!']);
  assert.equal(error.providerType, 'server_error');
  assert.match(error.message, /The server had an error/);
  assert.equal(fake.requests.length, 1);
});

test("an error in the stream whose code is an HTTP status (LiteLLM's and Azure's \"429\", OpenRouter's 429) counts as that status: its code, and a retry before the first chunk", async (t) => {
  const event = (code: unknown) => `data: ${JSON.stringify({ error: { message: 'upstream said no', type: null, param: null, code } })}\n\n`;
  const cases = [
    ['429', 'model_rate_limited'],
    [429, 'model_rate_limited'],
    ['503', 'model_unavailable'],
    ['401', 'model_auth_failed'],
    ['400', 'model_request_rejected'],
    ['rate_limit_exceeded', 'model_stream_error'],
  ] as const;
  for (const [code, expected] of cases) {
    const fake = await fakeProvider(t, () => ({ body: event(code) }));
    const error = providerError(await collect(model(fake.url)), expected);
    const status = Number(code);
    assert.equal(error.providerStatus, Number.isNaN(status) ? undefined : status, String(code));
    assert.equal(error.retryable, status === 429 || status >= 500, String(code));
    assert.match(error.message, /upstream said no/);
  }
  const clock = manualClock(t);
  t.mock.method(Math, 'random', () => 0);
  const fake = await fakeProvider(t, (index) => ({ body: index === 0 ? event('429') : STREAM }));
  const pending = collect(model(fake.url, { maxRetries: 1 }));
  await clock.scheduled(500);
  clock.fire(500);
  assert.equal((await pending).chunks.join(''), TEXT);
  assert.equal(fake.requests.length, 2);
});

test('a data line that is not JSON is a bad response', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: `${FIRST_EVENTS}data: {"choices": [\n\n` }));
  const outcome = await collect(model(fake.url));
  const error = providerError(outcome, 'model_bad_response');
  assert.equal(error.providerStatus, 200);
  assert.deepEqual(outcome.chunks, ['Hello']);
});

test('a 200 answer that is JSON but not a completion is a bad response; a whole completion is bound by maxResponseSize', async (t) => {
  for (const body of ['{"choices": []}', '{"object": "list", "data": []}', '{"choices": [{"index": 0, "text": "Hi"}]}', '[1, 2]', 'not JSON']) {
    const fake = await fakeProvider(t, () => ({ headers: { 'content-type': 'application/json' }, body }));
    providerError(await collect(model(fake.url)), 'model_bad_response');
  }
  // A server that ignores stream: true: its whole reply counts against the limit as a stream's bytes do.
  const content = 'x'.repeat(200_000);
  const fake = await fakeProvider(t, () => ({
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }] }),
    pieces: [16_384],
  }));
  assert.match(providerError(await collect(model(fake.url, { maxResponseSize: 100_000 })), 'model_bad_response').message, /maxResponseSize \(100000 bytes\)/);
  assert.equal((await collect(model(fake.url))).chunks.join(''), content);
});

test('a whole chat.completion that refuses, or that a content filter stopped, fails the turn as model_refused, as the stream would', async (t) => {
  const completion = (message: object, finish: string) => JSON.stringify({ object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', ...message }, finish_reason: finish }] });
  for (const body of [completion({ content: null, refusal: "I'm sorry, I can't help with that." }, 'stop'), completion({ content: null }, 'content_filter')]) {
    const fake = await fakeProvider(t, () => ({ headers: { 'content-type': 'application/json' }, body }));
    providerError(await collect(model(fake.url)), 'model_refused');
  }
});

test('a 200 answer that is a web page (a proxy, a wrong baseURL) is a bad response, not retried as a cut stream', async (t) => {
  const fake = await fakeProvider(t, () => ({ headers: { 'content-type': 'text/html; charset=utf-8' }, body: '<html><body>Sign in</body></html>' }));
  const error = providerError(await collect(model(fake.url, { maxRetries: 2 })), 'model_bad_response');
  assert.match(error.message, /check baseURL/);
  assert.equal(fake.requests.length, 1);
  // A server that streams SSE under another type (Flask's text/html default) still works: the body decides.
  const mislabelled = await fakeProvider(t, () => ({ headers: { 'content-type': 'text/html; charset=utf-8' }, body: STREAM }));
  assert.equal((await collect(model(mislabelled.url))).chunks.join(''), TEXT);
});

test('a refusal (delta.refusal) or a content filter stop fails the turn as model_refused, without a retry', async (t) => {
  const chunk = (choice: object) => `data: ${JSON.stringify({ choices: [{ index: 0, ...choice }] })}\n\n`;
  const bodies = {
    refusal: chunk({ delta: { role: 'assistant', content: null, refusal: '' } }) + chunk({ delta: { refusal: "I'm sorry, I can't help with that." } }) + chunk({ delta: {}, finish_reason: 'stop' }) + 'data: [DONE]\n\n',
    filter: `${FIRST_EVENTS}${chunk({ delta: {}, finish_reason: 'content_filter' })}data: [DONE]\n\n`,
  };
  for (const [name, body] of Object.entries(bodies)) {
    const fake = await fakeProvider(t, () => ({ body }));
    const outcome = await collect(model(fake.url, { maxRetries: 2 }));
    const error = providerError(outcome, 'model_refused');
    assert.match(error.message, name === 'refusal' ? /refused \(delta\.refusal\)/ : /content filter .*finish_reason content_filter/, name);
    assert.equal(error.retryable, false, name);
    assert.equal(fake.requests.length, 1, name);
  }
});

test("Node's fetch's own 300 s limits are model_timeout that says so, not a connection failure retried", async (t) => {
  const fetchWithLimits = await shortUndiciTimeouts();
  const silent = await fakeProvider(t, () => ({ silent: true }));
  const stalls = await fakeProvider(t, () => ({ body: FIRST_EVENTS, after: 'hold' }));
  for (const fake of [silent, stalls]) {
    const outcome = await collect(model(fake.url, { timeout: 600, maxRetries: 2, fetch: fetchWithLimits }));
    const error = providerError(outcome, 'model_timeout');
    assert.equal(error.status, 504);
    assert.match(error.message, /300 s, the limit of Node's own fetch/);
    assert.equal(fake.requests.length, 1);
  }
});

test('a connection cut mid-stream fails the turn and is not retried after the first chunk', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: FIRST_EVENTS, after: 'cut' }));
  const outcome = await collect(model(fake.url, { maxRetries: 2 }));
  providerError(outcome, 'model_stream_interrupted');
  assert.deepEqual(outcome.chunks, ['Hello']);
  assert.equal(fake.requests.length, 1);
});

test('a stream that ends cleanly without finish_reason or [DONE] is interrupted', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: FIRST_EVENTS }));
  providerError(await collect(model(fake.url)), 'model_stream_interrupted');
});

test('a refused connection is a connection error', async () => {
  const outcome = await collect(model(await closedPortURL()));
  const error = providerError(outcome, 'model_connection_failed');
  assert.equal(error.retryable, true);
});

test('a provider whose TLS certificate is refused, or an https baseURL to a plain HTTP port, is model_connection_failed saying why and how to fix it, not retried', async (t) => {
  // Self-signed for localhost (test/fixtures), as a local gateway's or a corporate proxy's private CA looks here.
  const cert = readFileSync('test/fixtures/tls-self-signed-cert.pem');
  const server = https.createServer({ cert, key: readFileSync('test/fixtures/tls-self-signed-key.pem') }, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' }).end(STREAM);
  });
  let connections = 0;
  server.on('connection', () => connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  const { port } = server.address() as AddressInfo;
  const noTls = (outcome: Awaited<ReturnType<typeof collect>>, code: string, fix: RegExp) => {
    const error = providerError(outcome, 'model_connection_failed');
    assert.equal(error.message.startsWith(`openai:gpt-4o-mini: no TLS connection to the provider (${code}); `), true, error.message);
    assert.match(error.message, fix);
    assert.equal(error.retryable, false);
  };
  noTls(await collect(model(`https://localhost:${port}`, { maxRetries: 2 })), 'DEPTH_ZERO_SELF_SIGNED_CERT', /NODE_EXTRA_CA_CERTS/);
  assert.equal(connections, 1, 'a certificate does not become trusted on retry');
  // Trusted, but baseURL names the server by an address its certificate does not hold.
  const trusting = await undiciFetch({ connect: { ca: cert } });
  noTls(await collect(model(`https://127.0.0.1:${port}`, { fetch: trusting, maxRetries: 2 })), 'ERR_TLS_CERT_ALTNAME_INVALID', /a host name the certificate holds/);
  assert.equal(connections, 2);
  assert.equal((await collect(model(`https://localhost:${port}`, { fetch: trusting }))).chunks.join(''), TEXT);
  // https to a provider serving plain HTTP (a local llama.cpp or Ollama).
  const plain = await fakeProvider(t, () => ({ body: STREAM }));
  noTls(await collect(model(plain.url.replace('http:', 'https:'), { maxRetries: 2 })), 'ERR_SSL_WRONG_VERSION_NUMBER', /use an http: baseURL/);
});

test('a server that answers something that is not HTTP is model_bad_response saying so, not retried, not "could not reach"', async (t) => {
  let requests = 0;
  const { url, close } = await listen((req, res) => {
    requests++;
    if (req.url?.includes('headers') === true) return void res.writeHead(200, { 'x-padding': 'a'.repeat(20 * 1024) }).end();
    // Bytes on the socket itself, past Node's writer: a malformed status line, or a bad chunk size after a first event.
    if (req.url?.includes('status') === true) req.socket.end('HTTP/1.1 abc\r\n\r\n');
    else req.socket.end(`HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n${FIRST_EVENTS.length.toString(16)}\r\n${FIRST_EVENTS}\r\nzz\r\n`);
  });
  t.after(close);
  const status = providerError(await collect(model(`${url}/status`, { maxRetries: 2 })), 'model_bad_response');
  // Node 24's fetch throws llhttp's HTTPParserError without its HPE_ code.
  assert.match(status.message, /answered with something that is not HTTP or that fetch refuses \((HPE_INVALID_STATUS|HTTPParserError)\)/);
  assert.equal(status.retryable, false);
  assert.equal(requests, 1, 'not retried');
  const chunk = await collect(model(`${url}/chunk`, { maxRetries: 2 }));
  assert.ok(chunk.chunks.length > 0, 'the first event was read');
  assert.match(providerError(chunk, 'model_bad_response').message, /\((HPE_INVALID_CHUNK_SIZE|HTTPParserError)\)/);
  assert.match(providerError(await collect(model(`${url}/headers`)), 'model_bad_response').message, /\(UND_ERR_HEADERS_OVERFLOW\)/);
});

test('a gzip or brotli body is decoded; one that does not decode as its Content-Encoding says (a proxy labelling a plain body) is model_bad_response saying so, not retried, and an error status keeps its code', async (t) => {
  let requests = 0;
  const RATE_LIMITED = JSON.stringify(ERRORS['429']);
  const { url, close } = await listen((req, res) => {
    requests++;
    const path = req.url ?? '';
    const encoding = path.includes('/br') ? 'br' : 'gzip';
    const compress = (text: string): Buffer => (encoding === 'br' ? brotliCompressSync(text) : gzipSync(text));
    const status = path.includes('/429') ? 429 : 200;
    const type = status === 200 ? 'text/event-stream' : 'application/json';
    res.writeHead(status, { 'content-type': type, 'content-encoding': encoding, 'retry-after': '7' });
    const body = status === 200 ? STREAM : RATE_LIMITED;
    res.end(path.includes('/plain') ? body : compress(body));
  });
  t.after(close);
  for (const encoding of ['gzip', 'br']) {
    const decoded = await collect(model(`${url}/${encoding}`));
    assert.equal(decoded.error, undefined, encoding);
    assert.equal(decoded.chunks.join(''), TEXT, encoding);
    requests = 0;
    const plain = providerError(await collect(model(`${url}/${encoding}/plain`, { maxRetries: 2 })), 'model_bad_response');
    assert.match(plain.message, /does not decode as its Content-Encoding says \((Z_DATA_ERROR|ERR__ERROR_FORMAT_\w+)\)/, encoding);
    assert.equal(requests, 1, `${encoding}: not retried`);
  }
  const limited = providerError(await collect(model(`${url}/429`)), 'model_rate_limited');
  assert.match(limited.message, /Rate limit reached/);
  // The status is the answer, whatever became of its body: the code, the retry and the Retry-After stay.
  const undecoded = providerError(await collect(model(`${url}/429/plain`)), 'model_rate_limited');
  assert.equal(undecoded.providerStatus, 429);
  assert.equal(undecoded.retryAfter, 7);
  assert.equal(undecoded.retryable, true);
});

test('retries a 429 with Retry-After: 0 before the first chunk, then streams', async (t) => {
  const fake = await fakeProvider(t, (index) =>
    index === 0
      ? { status: 429, headers: { 'retry-after': '0', 'content-type': 'application/json' }, body: JSON.stringify(ERRORS['429']) }
      : { body: STREAM },
  );
  const outcome = await collect(model(fake.url, { maxRetries: 2 }));
  assert.equal(outcome.error, undefined);
  assert.equal(outcome.chunks.join(''), TEXT);
  assert.equal(fake.requests.length, 2);
  assert.deepEqual(fake.requests[1]?.body, fake.requests[0]?.body);
});

test("retries a 408 and a 409 (OpenAI's lock timeout) before the first chunk, as OpenAI's SDK does, and obeys x-should-retry", async (t) => {
  const error = (status: number, headers: Record<string, string> = {}) => ({
    status,
    headers: { 'retry-after': '0', 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ error: { message: `HTTP ${status}`, type: 'invalid_request_error', param: null, code: null } }),
  });
  for (const first of [error(408), error(409), error(400, { 'x-should-retry': 'true' })]) {
    const fake = await fakeProvider(t, (index) => (index === 0 ? first : { body: STREAM }));
    const outcome = await collect(model(fake.url, { maxRetries: 1 }));
    assert.equal(outcome.error, undefined, String(first.status));
    assert.equal(outcome.chunks.join(''), TEXT);
    assert.equal(fake.requests.length, 2);
  }
  // The server says a retry would not help: a 503 with x-should-retry: false is not retried.
  const fake = await fakeProvider(t, () => error(503, { 'x-should-retry': 'false' }));
  const refused = providerError(await collect(model(fake.url, { maxRetries: 2 })), 'model_unavailable');
  assert.equal(refused.retryable, false);
  assert.equal(fake.requests.length, 1);
});

test('retries a connection cut before the first chunk after the backoff wait', async (t) => {
  const clock = manualClock(t);
  t.mock.method(Math, 'random', () => 0); // no jitter: the first wait is exactly 0.5 s
  const fake = await fakeProvider(t, (index) => (index === 0 ? { body: ': keep-alive\n\n', after: 'cut' } : { body: STREAM }));
  const pending = collect(model(fake.url, { maxRetries: 1 }));
  await clock.scheduled(500);
  assert.equal(fake.requests.length, 1, 'no second request before the wait is over');
  clock.fire(500);
  const outcome = await pending;
  assert.equal(outcome.chunks.join(''), TEXT);
  assert.equal(fake.requests.length, 2);
});

test('gives up after maxRetries and reports the last failure', async (t) => {
  const fake = await fakeProvider(t, () => ({ status: 500, headers: { 'retry-after': '0' }, body: JSON.stringify(ERRORS['500']) }));
  providerError(await collect(model(fake.url, { maxRetries: 2 })), 'model_unavailable');
  assert.equal(fake.requests.length, 3);
});

test('aborting the signal closes the request on the fake server at once', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: FIRST_EVENTS, after: 'hold' }));
  const controller = new AbortController();
  const iterator = model(fake.url).stream({
    system: undefined,
    messages: [{ role: 'user', content: 'Hello' }],
    signal: controller.signal,
  })[Symbol.asyncIterator]();
  assert.deepEqual(await iterator.next(), { done: false, value: 'Hello' });
  controller.abort();
  await assert.rejects(iterator.next(), { name: 'AbortError' });
  assert.deepEqual(await fake.requests[0]?.closed, { finished: false });
});

test('stopping the iteration early closes the request too', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: FIRST_EVENTS, after: 'hold' }));
  for await (const chunk of model(fake.url).stream({ system: undefined, messages: [], signal: new AbortController().signal })) {
    assert.equal(chunk, 'Hello');
    break;
  }
  assert.deepEqual(await fake.requests[0]?.closed, { finished: false });
});

test('bytes that arrive while the consumer holds a chunk do not restart the idle timer (the SSE decoder reads ahead)', async (t) => {
  const clock = manualClock(t);
  let respond: ((text: string) => void) | undefined;
  const { url: base, close } = await listen((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(FIRST_EVENTS);
    respond = (text) => res.write(text);
  });
  t.after(close);
  const iterator = model(base, { timeout: 5 }).stream({ system: undefined, messages: [], signal: AbortSignal.timeout(10_000) })[Symbol.asyncIterator]();
  assert.deepEqual(await iterator.next(), { done: false, value: 'Hello' });
  // The rest of the reply comes while 'Hello' is still held: read ahead, it must not start the clock again.
  (respond as (text: string) => void)(STREAM.split('\n\n').slice(2).join('\n\n'));
  await new Promise((resolve) => setTimeout(resolve, 100));
  assert.equal(clock.fire(5000), 0);
  const rest: string[] = [];
  for (let next = await iterator.next(); next.done !== true; next = await iterator.next()) if (typeof next.value === 'string') rest.push(next.value);
  assert.equal(['Hello', ...rest].join(''), TEXT);
});

test('timeout: Infinity sets no idle timer at all', async (t) => {
  const clock = manualClock(t);
  const fake = await fakeProvider(t, () => ({ body: FIRST_EVENTS, after: 'hold' }));
  const controller = new AbortController();
  const iterator = model(fake.url, { timeout: Infinity }).stream({ system: undefined, messages: [], signal: controller.signal })[Symbol.asyncIterator]();
  assert.deepEqual(await iterator.next(), { done: false, value: 'Hello' });
  const next = iterator.next();
  await new Promise(setImmediate); // the generator resumed, past where it re-arms the timer
  // Node would fire a timer of Infinity ms at once (after a TimeoutOverflowWarning).
  assert.equal(clock.fire(Infinity), 0);
  controller.abort();
  await assert.rejects(next, { name: 'AbortError' });
});

test('an already aborted signal sends nothing', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: STREAM }));
  const outcome = await collect(model(fake.url), { signal: AbortSignal.abort() });
  assert.equal((outcome.error as Error).name, 'AbortError');
  assert.equal(fake.requests.length, 0);
});

test('rejects misuse with errors that name the fix', () => {
  assert.throws(() => openAIModel(undefined as never), /openAIModel\(\{ model/);
  assert.throws(() => openAIModel({ model: '' }), /model name/);
  assert.throws(() => openAIModel({ model: 'm', timeout: 0 }), /seconds/);
  // A timer over 2^31 - 1 ms would fire at once; Infinity means none.
  assert.throws(() => openAIModel({ model: 'm', timeout: 3_000_000 }), /up to 2147483 .*or Infinity/);
  assert.equal(openAIModel({ model: 'm', timeout: Infinity }).name, 'openai:m');
  assert.throws(() => openAIModel({ model: 'm', baseURL: 'http://user:sk-secret-password@localhost:11434/v1' }), (error: Error) => {
    assert.match(error.message, /must not hold a user name or password/);
    assert.doesNotMatch(error.message, /sk-secret/);
    return true;
  });
  assert.throws(() => openAIModel({ model: 'm', maxRetries: -1 }), /maxRetries/);
  assert.throws(() => openAIModel({ model: 'm', baseURL: 'localhost:11434' }), /absolute http\(s\) URL/);
  assert.equal(openAIModel({ model: 'gpt-4o-mini' }).name, 'openai:gpt-4o-mini');
});

test('no response headers within timeout seconds fails with model_timeout (504) and closes the request', async (t) => {
  const clock = manualClock(t);
  const fake = await fakeProvider(t, () => ({ silent: true }));
  const pending = collect(model(fake.url, { timeout: 5, maxRetries: 2 }));
  await fake.request(0);
  assert.equal(clock.fire(5000), 1);
  const error = providerError(await pending, 'model_timeout');
  assert.equal(error.status, 504);
  assert.match(error.message, /5 s/);
  assert.deepEqual(await fake.requests[0]?.closed, { finished: false });
  assert.equal(fake.requests.length, 1, 'a timeout is not retried');
});

test('a stream that stops making progress for timeout seconds fails with model_timeout', async (t) => {
  const clock = manualClock(t);
  const fake = await fakeProvider(t, () => ({ body: FIRST_EVENTS, after: 'hold' }));
  const iterator = model(fake.url, { timeout: 5 }).stream({
    system: undefined,
    messages: [{ role: 'user', content: 'Hello' }],
    signal: new AbortController().signal,
  })[Symbol.asyncIterator]();
  assert.deepEqual(await iterator.next(), { done: false, value: 'Hello' });
  // While the consumer holds a chunk the timer is stopped: a slow reader is not a silent provider.
  assert.equal(clock.fire(5000), 0);
  const next = iterator.next();
  await clock.scheduled(5000);
  // Each piece of the body re-armed the timer: only the last one is live.
  assert.equal(clock.fire(5000), 1);
  await assert.rejects(next, { name: 'ModelProviderError', code: 'model_timeout', status: 504 });
  assert.deepEqual(await fake.requests[0]?.closed, { finished: false });
});

test('aborting during the retry wait stops it at once, without another request', async (t) => {
  const clock = manualClock(t);
  const fake = await fakeProvider(t, () => ({ status: 429, headers: { 'retry-after': '30' }, body: JSON.stringify(ERRORS['429']) }));
  const controller = new AbortController();
  const pending = collect(model(fake.url, { maxRetries: 2 }), { signal: controller.signal });
  const wait = await clock.scheduled(30_000);
  controller.abort();
  const outcome = await pending;
  assert.equal((outcome.error as Error).name, 'AbortError');
  assert.equal(wait.cleared, true);
  assert.equal(fake.requests.length, 1);
});

test('a provider that ends its body a little after [DONE] keeps its connection: the rest is read, not cancelled', async (t) => {
  const ports = new Set<number>();
  const { url, close } = await listen((req, res) => {
    ports.add(req.socket.remotePort as number);
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(STREAM);
      setTimeout(() => res.end(), 30); // the chunked encoding's end, in a later read
    });
  });
  t.after(close);
  const chat = openAIModel({ model: 'gpt-4o-mini', apiKey: API_KEY, baseURL: `${url}/v1`, maxRetries: 0 });
  for (let turn = 0; turn < 3; turn++) {
    assert.equal((await collect(chat)).error, undefined);
    await new Promise((resolve) => setTimeout(resolve, 60)); // the next turn starts once the body ended
  }
  assert.equal(ports.size, 1, `turns used ${ports.size} connections`);
});

test('a redirect is not followed: the key, custom headers and conversation stay with baseURL, and the turn fails as model_redirect', async (t) => {
  const elsewhere = await fakeProvider(t, () => ({ body: STREAM }));
  // localhost and 127.0.0.1 are two origins.
  const target = `${elsewhere.url.replace('127.0.0.1', 'localhost')}/v1/chat/completions?token=abc`;
  for (const status of [301, 302, 307, 308]) {
    const gateway = await fakeProvider(t, () => ({ status, headers: { location: target }, body: 'moved' }));
    const outcome = await collect(model(gateway.url, { headers: { 'api-key': 'azure-key-0123456789' }, maxRetries: 2 }));
    const error = providerError(outcome, 'model_redirect');
    assert.equal(error.status, 502);
    assert.equal(error.providerStatus, status);
    assert.match(error.message, /point baseURL at the server that answers/);
    assert.match(error.message, /localhost:\d+\/v1\/chat\/completions/);
    assert.doesNotMatch(error.message, /token=abc|SECRET|azure-key/);
    assert.deepEqual(outcome.chunks, []);
    assert.equal(gateway.requests.length, 1, 'a redirect is not retried');
  }
  assert.equal(elsewhere.requests.length, 0);
});

test('a 307 or 308 on the same origin (a gateway adding a trailing slash) is followed with the same POST; a 301 there is not', async (t) => {
  for (const status of [307, 308]) {
    const gateway = await fakeProvider(t, (_index, request) => (request.url.endsWith('/')
      ? { body: STREAM }
      : { status, headers: { location: `${request.url}/` }, body: 'moved' }));
    const outcome = await collect(model(gateway.url, { maxRetries: 0 }));
    assert.equal(outcome.error, undefined, String(status));
    assert.deepEqual(gateway.requests.map((request) => [request.method, request.url]), [['POST', '/v1/chat/completions'], ['POST', '/v1/chat/completions/']]);
    assert.deepEqual(gateway.requests[1]?.body, gateway.requests[0]?.body, 'the same conversation, sent again');
    assert.equal(gateway.requests[1]?.headers.authorization, gateway.requests[0]?.headers.authorization);
  }
  const moved = await fakeProvider(t, (_index, request) => ({ status: 301, headers: { location: `${request.url}/` }, body: 'moved' }));
  providerError(await collect(model(moved.url, { maxRetries: 0 })), 'model_redirect');
  assert.equal(moved.requests.length, 1, 'a 301 would turn the POST into a GET: not followed');
  // A gateway that redirects for ever is given up on.
  const loop = await fakeProvider(t, (index) => ({ status: 307, headers: { location: `/v1/chat/completions/${index}` }, body: 'again' }));
  providerError(await collect(model(loop.url, { maxRetries: 0 })), 'model_redirect');
  assert.equal(loop.requests.length, 6);
});

test('maxResponseSize bounds the bytes read from a provider that never ends its stream', async (t) => {
  const { url, close } = await listen((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const piece = `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: 'x'.repeat(4000) }, finish_reason: null }] })}\n\n`;
    const write = (): void => {
      while (!res.destroyed && res.write(piece));
      if (!res.destroyed) res.once('drain', write);
    };
    write();
  });
  t.after(close);
  const outcome = await collect(model(url, { maxResponseSize: 100_000 }));
  const error = providerError(outcome, 'model_bad_response');
  assert.match(error.message, /maxResponseSize \(100000 bytes\)/);
  assert.ok(outcome.chunks.join('').length < 100_000);
  assert.throws(() => openAIModel({ model: 'm', maxResponseSize: 0 }), /maxResponseSize is in bytes/);
});

test("llama.cpp's error line (error: {json}, then [DONE]) fails the turn with the provider's message, before or after text", async (t) => {
  const line = 'error: {"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4100,"n_ctx":4096}\n\n';
  const fake = await fakeProvider(t, (index) => ({ body: index === 0 ? `${line}data: [DONE]\n\n` : `${FIRST_EVENTS}error: Compute error. ${API_KEY}\n\ndata: [DONE]\n\n` }));
  const before = await collect(model(fake.url, { maxRetries: 2 }));
  const error = providerError(before, 'model_request_rejected');
  assert.equal(error.providerStatus, 400);
  assert.equal(error.providerType, 'exceed_context_size_error');
  assert.match(error.message, /exceeds the available context size/);
  assert.equal(fake.requests.length, 1, 'a 400 is not retried');
  // Plain text after the first chunk: the turn fails (the key it quoted cut out), and is not retried.
  const after = await collect(model(fake.url, { maxRetries: 2 }));
  assert.deepEqual(after.chunks, ['Hello']);
  const late = providerError(after, 'model_stream_error');
  assert.match(late.message, /Compute error/);
  assert.doesNotMatch(late.message, /SECRET/);
  assert.equal(fake.requests.length, 2);
});

test('an apiKey or header value that fetch could not send is refused when the model is made, without showing it', () => {
  // A line break at the start too: it ends up inside `Bearer <key>`, where fetch refuses it and quotes the key.
  const keys = ['sk-proj-SECRET\nSECRET0123456789', 'sk-proj-SECRET0123456789\u201d', 'sk-proj-SECRET0123456789\u200b', 'sk-proj-SECRET\u0000x', 'x\nsk-proj-SECRET0123456789'];
  const hidden = (pattern: RegExp) => (error: Error): boolean => {
    assert.ok(error instanceof TypeError);
    assert.match(error.message, pattern);
    assert.doesNotMatch(error.message, /SECRET/);
    return true;
  };
  for (const apiKey of keys) {
    assert.throws(() => openAIModel({ model: 'm', apiKey }), hidden(/^openAIModel: apiKey holds a line break/));
    assert.throws(() => openAIModel({ model: 'm', headers: { 'api-key': apiKey } }), hidden(/^openAIModel: headers holds an invalid header/));
  }
  assert.throws(() => openAIModel({ model: 'm', headers: { 'bad name': 'v' } }), hidden(/headers holds an invalid header name/));
  // Ends are trimmed, as fetch does: a key read whole from a file still works.
  assert.equal(openAIModel({ model: 'm', apiKey: 'sk-x\n' }).name, 'openai:m');
});

test('a key with a line break or spaces at an end is sent trimmed (a key file read whole), never as "Bearer \\n<key>"', async (t) => {
  const provider = await fakeProvider(t, () => ({ body: STREAM }));
  for (const apiKey of [`\n${API_KEY}`, ` ${API_KEY}\r\n`]) {
    assert.equal((await collect(openAIModel({ model: 'gpt-4o-mini', apiKey, baseURL: `${provider.url}/v1`, maxRetries: 0 }))).error, undefined);
  }
  assert.deepEqual(provider.requests.map((request) => request.headers.authorization), [`Bearer ${API_KEY}`, `Bearer ${API_KEY}`]);
});

test("Mistral's content as a list of typed parts (Magistral): the text parts are the reply, thinking is left out", async (t) => {
  const chunk = (content: unknown, finish: string | null = null) =>
    `data: ${JSON.stringify({ id: 'x', object: 'chat.completion.chunk', model: 'magistral-medium-2509', choices: [{ index: 0, delta: { role: 'assistant', content }, finish_reason: finish }] })}\n\n`;
  const body = [
    chunk([{ type: 'thinking', thinking: [{ type: 'text', text: 'The user asks 2+2.' }] }]),
    chunk([{ type: 'text', text: '2 + 2 = ' }]),
    chunk([{ type: 'text', text: '4' }, { type: 'image_url', image_url: 'x' }, { type: 'text', text: '.' }]),
    chunk('', 'stop'),
    'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":20,"total_tokens":25}}\n\n',
    'data: [DONE]\n\n',
  ].join('');
  const fake = await fakeProvider(t, () => ({ body, pieces: SPLITS }));
  const outcome = await collect(model(fake.url, { body: { stream_options: undefined } }));
  assert.equal(outcome.error, undefined);
  assert.deepEqual(outcome.chunks, ['2 + 2 = ', '4.']);
  assert.deepEqual(outcome.usage, { inputTokens: 5, outputTokens: 20, totalTokens: 25 });
});

test('a provider that keeps its body open after [DONE] with keepalive comments has its connection closed about a second later', async (t) => {
  let closed!: (finished: boolean) => void;
  const whenClosed = new Promise<boolean>((resolve) => (closed = resolve));
  const { url, close } = await listen((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(STREAM);
    const ping = setInterval(() => res.write(': keepalive\n\n'), 100);
    res.on('close', () => {
      clearInterval(ping);
      closed(res.writableFinished);
    });
  });
  t.after(close);
  const outcome = await collect(model(url));
  assert.equal(outcome.error, undefined);
  assert.equal(outcome.chunks.join(''), TEXT);
  let deadline: ReturnType<typeof setTimeout> | undefined;
  t.after(() => clearTimeout(deadline));
  const expired = new Promise<string>((resolve) => (deadline = setTimeout(() => resolve('still open after 5 s'), 5000)));
  assert.equal(await Promise.race([whenClosed, expired]), false, 'the client closed the connection');
});

test('a baseURL with a query (older Azure OpenAI: ?api-version=...) gets the path before the query, which is kept', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: STREAM }));
  const outcome = await collect(openAIModel({ model: 'gpt4o', baseURL: `${fake.url}/openai/deployments/gpt4o?api-version=2024-10-21`, headers: { 'api-key': 'azure-key' } }));
  assert.equal(outcome.error, undefined);
  assert.equal(fake.requests[0]?.url, '/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21');
});

test("DeepSeek's resource cut (finish_reason insufficient_system_resource) before any text is retried after the backoff wait", async (t) => {
  const clock = manualClock(t);
  t.mock.method(Math, 'random', () => 0);
  const cut = `data: ${JSON.stringify({ choices: [{ index: 0, delta: { role: 'assistant', content: '', reasoning_content: 'Let me think' }, finish_reason: 'insufficient_system_resource' }] })}\n\ndata: [DONE]\n\n`;
  const fake = await fakeProvider(t, (index) => ({ body: index === 0 ? cut : STREAM }));
  const pending = collect(model(fake.url, { maxRetries: 1 }));
  // Raced with the turn: one that fails at once, unretried, must fail this test, not hang it.
  await Promise.race([clock.scheduled(500), pending]);
  clock.fire(500);
  const outcome = await pending;
  assert.equal(outcome.error, undefined);
  assert.equal(outcome.chunks.join(''), TEXT);
  assert.equal(fake.requests.length, 2);
});

test("a provider's error message goes to the log on one line: a traceback's line breaks would read as the log's own lines", async (t) => {
  const traceback = 'Traceback (most recent call last):\n  File "serve.py", line 1\nValueError: boom\n2026-01-01 ERROR forged log line';
  const replies = [
    { body: `data: ${JSON.stringify({ error: { message: traceback, type: 'internal\nerror' } })}\n\n` },
    { status: 400, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ error: { message: traceback } }) },
    { status: 500, headers: { 'content-type': 'text/plain' }, body: traceback },
    { status: 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ detail: traceback }) },
  ];
  for (const [index, reply] of replies.entries()) {
    const fake = await fakeProvider(t, () => reply);
    const { error } = await collect(model(fake.url));
    assert.ok(error instanceof Error, `${index}`);
    assert.doesNotMatch(error.message, /\n/, `${index}`);
    assert.match(error.message, /Traceback \(most recent call last\): File "serve.py", line 1 ValueError: boom 2026-01-01 ERROR forged log line/, `${index}`);
  }
});
