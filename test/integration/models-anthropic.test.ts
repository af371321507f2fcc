import assert from 'node:assert/strict';
import test from 'node:test';
import { ANTHROPIC_VERSION, anthropicModel } from '../../src/models/anthropic.ts';
import {
  collect,
  fakeProvider,
  fixture,
  manualClock,
  providerError,
  SPLITS,
  splittingFetch,
} from './models-fake-provider.ts';

const API_KEY = 'sk-ant-api03-test0123456789SECRET';
const STREAM = fixture('anthropic-stream.sse');
const ERRORS = JSON.parse(fixture('anthropic-errors.json')) as Record<string, unknown>;
/** The documented stream before its first text delta (message_start, content_block_start, ping). */
const PREAMBLE = STREAM.slice(0, STREAM.indexOf('event: content_block_delta'));
const OVERLOADED = 'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n';

const model = (url: string, extra: Partial<Parameters<typeof anthropicModel>[0]> = {}) =>
  anthropicModel({ model: 'claude-sonnet-4-5', apiKey: API_KEY, baseURL: `${url}/v1`, maxRetries: 0, ...extra });

test('assembles the documented stream from LF, CRLF and CR variants split mid-line', async (t) => {
  const variants = { LF: STREAM, CRLF: STREAM.replaceAll('\n', '\r\n'), CR: STREAM.replaceAll('\n', '\r') };
  for (const [name, body] of Object.entries(variants)) {
    const fake = await fakeProvider(t, () => ({ body, pieces: SPLITS }));
    for (const fetch of [globalThis.fetch, splittingFetch(SPLITS)]) {
      const outcome = await collect(model(fake.url, { fetch }));
      assert.equal(outcome.error, undefined, name);
      assert.deepEqual(outcome.chunks, ['Hello', '!'], name);
      assert.deepEqual(outcome.usage, { inputTokens: 25, outputTokens: 15, totalTokens: 40 }, name);
      assert.equal(outcome.truncated, false, name);
    }
  }
});

test('a reply stopped at max_tokens, at the context window or paused mid server-tool turn is kept and marked truncated', async (t) => {
  for (const reason of ['max_tokens', 'model_context_window_exceeded', 'pause_turn']) {
    const body = STREAM.replace('"stop_reason": "end_turn"', `"stop_reason": "${reason}"`);
    assert.notEqual(body, STREAM);
    const fake = await fakeProvider(t, () => ({ body }));
    const outcome = await collect(model(fake.url));
    assert.equal(outcome.error, undefined, reason);
    assert.deepEqual(outcome.chunks, ['Hello', '!'], reason);
    assert.equal(outcome.truncated, true, reason);
    assert.deepEqual(outcome.usage, { inputTokens: 25, outputTokens: 15, totalTokens: 40 }, reason);
  }
});

test('counts cached input tokens as input', async (t) => {
  const body = STREAM.replace(
    '"usage": {"input_tokens": 25, "output_tokens": 1}',
    '"usage": {"input_tokens": 5, "cache_creation_input_tokens": 12, "cache_read_input_tokens": 8, "output_tokens": 1}',
  );
  const fake = await fakeProvider(t, () => ({ body }));
  assert.deepEqual((await collect(model(fake.url))).usage, { inputTokens: 25, outputTokens: 15, totalTokens: 40 });
});

test('a message_delta that reports input_tokens without the cache counts keeps those of message_start, as the SDKs do', async (t) => {
  // The API's message_delta usage fields are each cumulative and optional; a gateway may send input_tokens alone.
  const body = STREAM.replace(
    '"usage": {"input_tokens": 25, "output_tokens": 1}',
    '"usage": {"input_tokens": 5, "cache_creation_input_tokens": 12, "cache_read_input_tokens": 8, "output_tokens": 1}',
  ).replace('"usage": {"output_tokens": 15}', '"usage": {"input_tokens": 5, "cache_read_input_tokens": null, "output_tokens": 15}');
  const fake = await fakeProvider(t, () => ({ body }));
  assert.deepEqual((await collect(model(fake.url))).usage, { inputTokens: 25, outputTokens: 15, totalTokens: 40 });
});

test('skips content it does not stream as text: tool input, thinking, unknown events', async (t) => {
  const extra =
    'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\\"a\\":"}}\n\n' +
    'event: some_future_event\ndata: {"type": "some_future_event"}\n\n';
  const body = STREAM.replace('event: content_block_stop', `${extra}event: content_block_stop`);
  const fake = await fakeProvider(t, () => ({ body }));
  assert.deepEqual((await collect(model(fake.url))).chunks, ['Hello', '!']);
});

test('sends the system prompt as the top-level field and the history as messages', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: STREAM }));
  await collect(model(fake.url, { maxTokens: 256 }), {
    system: 'You are terse.',
    messages: [
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello.', usage: { outputTokens: 2 } },
      { role: 'user', content: 'How are you?' },
    ],
  });
  const [request] = fake.requests;
  assert.equal(request?.method, 'POST');
  assert.equal(request?.url, '/v1/messages');
  assert.deepEqual(request?.body, {
    model: 'claude-sonnet-4-5',
    max_tokens: 256,
    messages: [
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello.' },
      { role: 'user', content: 'How are you?' },
    ],
    stream: true,
    system: 'You are terse.',
  });
});

test('leaves out what the API would refuse in every later request: blank turns kept in history, and assistant turns that would then come first', async (t) => {
  const cases = [
    {
      name: 'an empty reply',
      messages: [['user', 'Hi'], ['assistant', ''], ['user', 'Still there?']],
      sent: [['user', 'Hi'], ['user', 'Still there?']],
    },
    {
      name: 'whitespace-only replies',
      messages: [['user', 'Say nothing'], ['assistant', '\n\n'], ['user', 'Hello?'], ['assistant', ' \t'], ['user', 'Anyone?']],
      sent: [['user', 'Say nothing'], ['user', 'Hello?'], ['user', 'Anyone?']],
    },
    {
      name: 'a blank first question (another model took it)',
      messages: [['user', ' '], ['assistant', 'Yes?'], ['user', 'What is 2 + 2?']],
      sent: [['user', 'What is 2 + 2?']],
    },
  ] as const;
  const fake = await fakeProvider(t, () => ({ body: STREAM }));
  for (const [index, { name, messages }] of cases.entries()) {
    await collect(model(fake.url), { system: undefined, messages: messages.map(([role, content]) => ({ role, content })) });
    const sent = (fake.requests[index]?.body as { messages: unknown }).messages;
    assert.deepEqual(sent, cases[index]?.sent.map(([role, content]) => ({ role, content })), name);
  }
});

test('leaves system out without a system prompt and defaults max_tokens', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: STREAM }));
  await collect(model(fake.url));
  assert.equal('system' in (fake.requests[0]?.body ?? {}), false);
  assert.equal(fake.requests[0]?.body['max_tokens'], 4096);
});

test('body.max_tokens is sent as given, not replaced by the default (a thinking budget above 4096 needs it); giving maxTokens too throws naming both', async (t) => {
  // As the API answers a thinking budget that max_tokens does not exceed.
  const fake = await fakeProvider(t, (_, request) => {
    const budget = (request.body['thinking'] as { budget_tokens?: number } | undefined)?.budget_tokens ?? 0;
    if (budget < Number(request.body['max_tokens'])) return { body: STREAM };
    const error = { type: 'error', error: { type: 'invalid_request_error', message: '`max_tokens` must be greater than `thinking.budget_tokens`' } };
    return { status: 400, headers: { 'content-type': 'application/json' }, body: JSON.stringify(error) };
  });
  const thinking = { type: 'enabled', budget_tokens: 10000 };
  const outcome = await collect(model(fake.url, { body: { max_tokens: 16000, thinking } }));
  assert.equal(outcome.error, undefined);
  assert.deepEqual(outcome.chunks, ['Hello', '!']);
  assert.equal(fake.requests[0]?.body['max_tokens'], 16000);
  assert.deepEqual(fake.requests[0]?.body['thinking'], thinking);
  // A field set to undefined is left out, as for any body field: the default then applies.
  await collect(model(fake.url, { body: { max_tokens: undefined } }));
  assert.equal(fake.requests[1]?.body['max_tokens'], 4096);
  assert.throws(() => model(fake.url, { maxTokens: 1024, body: { max_tokens: 16000 } }), /pass maxTokens or body\.max_tokens, not both/);
  for (const max_tokens of [0, 1.5, '16000', null]) {
    assert.throws(() => model(fake.url, { body: { max_tokens } }), /body\.max_tokens must be a whole number >= 1/, String(max_tokens));
  }
});

test('sends x-api-key, anthropic-version and JSON headers, never a bearer token', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: STREAM }));
  await collect(model(fake.url, { headers: { 'anthropic-beta': 'some-beta' } }));
  const headers = fake.requests[0]?.headers;
  assert.equal(headers?.['x-api-key'], API_KEY);
  assert.equal(headers?.['anthropic-version'], '2023-06-01');
  assert.equal(ANTHROPIC_VERSION, '2023-06-01');
  assert.equal(headers?.['content-type'], 'application/json');
  assert.equal(headers?.['anthropic-beta'], 'some-beta');
  assert.equal(headers?.authorization, undefined);
});

test('maps each documented HTTP error to a typed error with the provider status and type', async (t) => {
  const cases = [
    [401, 'model_auth_failed', 'authentication_error'],
    [403, 'model_auth_failed', 'permission_error'],
    [404, 'model_not_found', 'not_found_error'],
    [429, 'model_rate_limited', 'rate_limit_error'],
    [500, 'model_unavailable', 'api_error'],
    [529, 'model_unavailable', 'overloaded_error'],
  ] as const;
  for (const [status, code, type] of cases) {
    const fake = await fakeProvider(t, () => ({
      status,
      headers: { 'content-type': 'application/json', 'request-id': 'req_011CSHoEeqs5C35K2UUqR7Fy' },
      body: JSON.stringify(ERRORS[status]),
    }));
    const error = providerError(await collect(model(fake.url)), code);
    assert.equal(error.status, 502);
    assert.equal(error.provider, 'anthropic');
    assert.equal(error.providerStatus, status);
    assert.equal(error.providerType, type);
    assert.equal(error.retryable, status === 429 || status >= 500);
    assert.ok(!error.message.includes(API_KEY) && !error.message.includes('SECRET'), error.message);
    // An SDK-style root without /v1 (as ANTHROPIC_BASE_URL takes it) given as baseURL is the likely 404.
    if (status === 404) assert.match(error.message, /baseURL \(which includes the API version path, such as \/v1\)/);
  }
});

test('an error event after the first text fails the turn with the code its status would give, without a retry', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: fixture('anthropic-stream-error.sse'), pieces: SPLITS }));
  const outcome = await collect(model(fake.url, { maxRetries: 2 }));
  const error = providerError(outcome, 'model_unavailable');
  assert.deepEqual(outcome.chunks, ['Hello']);
  assert.equal(error.providerType, 'overloaded_error');
  assert.equal(error.retryable, true, 'retryable, but text was out: no retry');
  assert.match(error.message, /Overloaded/);
  assert.equal(fake.requests.length, 1);
});

test("each documented error type in an event: error gets the code and retry of its HTTP status, as the same failure before the stream would", async (t) => {
  const cases = [
    ['invalid_request_error', 400, 'model_request_rejected'],
    ['authentication_error', 401, 'model_auth_failed'],
    ['billing_error', 402, 'model_request_rejected'],
    ['permission_error', 403, 'model_auth_failed'],
    ['not_found_error', 404, 'model_not_found'],
    ['request_too_large', 413, 'model_request_rejected'],
    ['rate_limit_error', 429, 'model_rate_limited'],
    ['api_error', 500, 'model_unavailable'],
    ['timeout_error', 504, 'model_unavailable'],
    ['overloaded_error', 529, 'model_unavailable'],
    // A type added later, unknown here: still an error in the stream.
    ['some_future_error', undefined, 'model_stream_error'],
  ] as const;
  for (const [type, status, code] of cases) {
    const event = `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type, message: `said ${type}` } })}\n\n`;
    const fake = await fakeProvider(t, () => ({ body: PREAMBLE + event }));
    const error = providerError(await collect(model(fake.url)), code);
    assert.equal(error.providerStatus, status, type);
    assert.equal(error.providerType, type);
    assert.equal(error.retryable, status === 429 || (status ?? 0) >= 500, type);
    assert.match(error.message, new RegExp(`said ${type}`));
    // The same failure as the answer's status gets the same code.
    if (status !== undefined) {
      const answered = await fakeProvider(t, () => ({ status, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ type: 'error', error: { type, message: 'x' } }) }));
      assert.equal(providerError(await collect(model(answered.url)), code).retryable, error.retryable, type);
    }
  }
  // Before the first chunk, a type that is not retried (invalid_request_error) is sent once, with retries left.
  const fake = await fakeProvider(t, () => ({ body: `${PREAMBLE}event: error\ndata: {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long"}}\n\n` }));
  providerError(await collect(model(fake.url, { maxRetries: 2 })), 'model_request_rejected');
  assert.equal(fake.requests.length, 1);
});

test('an overloaded error event before any text is retried', async (t) => {
  const fake = await fakeProvider(t, (index) => ({ body: index === 0 ? PREAMBLE + OVERLOADED : STREAM }));
  const clock = manualClock(t);
  t.mock.method(Math, 'random', () => 0);
  const pending = collect(model(fake.url, { maxRetries: 1 }));
  await clock.scheduled(500);
  clock.fire(500);
  const outcome = await pending;
  assert.equal(outcome.error, undefined);
  assert.deepEqual(outcome.chunks, ['Hello', '!']);
  assert.equal(fake.requests.length, 2);
});

test('a whole message JSON (stream: true ignored) that refuses fails as model_refused; a JSON that is no message is a bad response', async (t) => {
  const refusal = JSON.stringify({ type: 'message', role: 'assistant', content: [{ type: 'text', text: 'I' }], stop_reason: 'refusal', usage: { input_tokens: 5, output_tokens: 1 } });
  const bodies = [[refusal, 'model_refused'], ['{"type": "error", "error": {"type": "api_error", "message": "Internal"}}', 'model_bad_response'], ['{"content": "Hi"}', 'model_bad_response']] as const;
  for (const [body, code] of bodies) {
    const fake = await fakeProvider(t, () => ({ headers: { 'content-type': 'application/json' }, body }));
    providerError(await collect(model(fake.url)), code);
  }
});

test('a data line that is not JSON is a bad response', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: `${PREAMBLE}event: ping\ndata: {"type": "pi\n\n` }));
  providerError(await collect(model(fake.url)), 'model_bad_response');
});

test('a connection cut mid-stream fails the turn and is not retried after the first chunk', async (t) => {
  const body = STREAM.slice(0, STREAM.indexOf('event: content_block_stop'));
  const fake = await fakeProvider(t, () => ({ body, after: 'cut', pieces: SPLITS }));
  const outcome = await collect(model(fake.url, { maxRetries: 2 }));
  providerError(outcome, 'model_stream_interrupted');
  assert.deepEqual(outcome.chunks, ['Hello', '!']);
  assert.equal(fake.requests.length, 1);
});

test('a stream that ends cleanly after message_delta carried a stop_reason, without message_stop, is whole, as the SDKs read it', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: STREAM.slice(0, STREAM.indexOf('event: message_stop')), pieces: SPLITS }));
  const outcome = await collect(model(fake.url));
  assert.equal(outcome.error, undefined);
  assert.deepEqual(outcome.chunks, ['Hello', '!']);
  assert.deepEqual(outcome.usage, { inputTokens: 25, outputTokens: 15, totalTokens: 40 });
  // The same end after a max_tokens stop keeps the truncated mark.
  const maxTokens = STREAM.replace('"end_turn"', '"max_tokens"');
  const cut = await fakeProvider(t, () => ({ body: maxTokens.slice(0, maxTokens.indexOf('event: message_stop')) }));
  const truncated = await collect(model(cut.url));
  assert.equal(truncated.error, undefined);
  assert.equal(truncated.truncated, true);
});

test('a stream that ends before a stop_reason arrived is interrupted: after the text, or at a message_delta without one', async (t) => {
  const nullStop = STREAM.replace('"stop_reason": "end_turn"', '"stop_reason": null');
  const noStop = nullStop.slice(0, nullStop.indexOf('event: message_stop'));
  for (const body of [STREAM.slice(0, STREAM.indexOf('event: message_delta')), noStop]) {
    const fake = await fakeProvider(t, () => ({ body }));
    const outcome = await collect(model(fake.url));
    providerError(outcome, 'model_stream_interrupted');
    assert.deepEqual(outcome.chunks, ['Hello', '!']);
  }
});

test('retries a 429 with Retry-After: 0 before the first chunk, then streams', async (t) => {
  const fake = await fakeProvider(t, (index) =>
    index === 0
      ? { status: 429, headers: { 'retry-after': '0', 'content-type': 'application/json' }, body: JSON.stringify(ERRORS['429']) }
      : { body: STREAM },
  );
  const outcome = await collect(model(fake.url, { maxRetries: 2 }));
  assert.deepEqual(outcome.chunks, ['Hello', '!']);
  assert.equal(fake.requests.length, 2);
});

test("retries a 408 and a 409 before the first chunk, as Anthropic's SDK does, and obeys x-should-retry", async (t) => {
  const error = (status: number, headers: Record<string, string> = {}) => ({
    status,
    headers: { 'retry-after': '0', 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ type: 'error', error: { type: 'api_error', message: `HTTP ${status}` } }),
  });
  for (const first of [error(408), error(409), error(400, { 'x-should-retry': 'true' })]) {
    const fake = await fakeProvider(t, (index) => (index === 0 ? first : { body: STREAM }));
    const outcome = await collect(model(fake.url, { maxRetries: 1 }));
    assert.deepEqual(outcome.chunks, ['Hello', '!'], String(first.status));
    assert.equal(fake.requests.length, 2);
  }
  const fake = await fakeProvider(t, () => error(529, { 'x-should-retry': 'false' }));
  assert.equal(providerError(await collect(model(fake.url, { maxRetries: 2 })), 'model_unavailable').retryable, false);
  assert.equal(fake.requests.length, 1);
});

test('aborting the signal closes the request on the fake server at once', async (t) => {
  const body = STREAM.slice(0, STREAM.indexOf('event: content_block_stop'));
  const fake = await fakeProvider(t, () => ({ body, after: 'hold' }));
  const controller = new AbortController();
  const iterator = model(fake.url).stream({
    system: 'sys',
    messages: [{ role: 'user', content: 'Hello' }],
    signal: controller.signal,
  })[Symbol.asyncIterator]();
  assert.deepEqual(await iterator.next(), { done: false, value: 'Hello' });
  controller.abort();
  await assert.rejects(iterator.next(), { name: 'AbortError' });
  assert.deepEqual(await fake.requests[0]?.closed, { finished: false });
});

test('rejects misuse with errors that name the fix', () => {
  assert.throws(() => anthropicModel(null as never), /anthropicModel\(\{ model/);
  assert.throws(() => anthropicModel({ model: 'claude-sonnet-4-5', apiKey: '' }), /pass apiKey/);
  assert.throws(() => anthropicModel({ model: 'claude-sonnet-4-5', apiKey: 'k', maxTokens: 0 }), /maxTokens/);
  assert.throws(() => anthropicModel({ model: 'claude-sonnet-4-5', apiKey: 'k', timeout: -1 }), /seconds/);
  assert.equal(anthropicModel({ model: 'claude-sonnet-4-5', apiKey: 'k' }).name, 'anthropic:claude-sonnet-4-5');
});

test('a redirect is not followed: x-api-key and the conversation stay with baseURL, and the turn fails as model_redirect', async (t) => {
  const elsewhere = await fakeProvider(t, () => ({ body: STREAM }));
  const gateway = await fakeProvider(t, (_, request) => ({
    status: 307,
    headers: { location: `${elsewhere.url.replace('127.0.0.1', 'localhost')}${request.url}` },
  }));
  const outcome = await collect(model(gateway.url));
  const error = providerError(outcome, 'model_redirect');
  assert.equal(error.status, 502);
  assert.doesNotMatch(error.message, /SECRET/);
  assert.deepEqual(outcome.chunks, []);
  assert.equal(elsewhere.requests.length, 0);
});

test('rejects a maxResponseSize that is not a whole number of bytes', () => {
  assert.throws(() => anthropicModel({ model: 'claude-sonnet-4-5', apiKey: 'k', maxResponseSize: 1.5 }), /maxResponseSize is in bytes/);
});

test('an apiKey or header value that fetch could not send is refused when the model is made, without showing it', () => {
  for (const apiKey of ['sk-ant-SECRET\nSECRET0123456789', 'sk-ant-SECRET0123456789\u201d', 'sk-ant-SECRET\u0000x']) {
    for (const make of [() => anthropicModel({ model: 'claude-sonnet-4-5', apiKey }), () => anthropicModel({ model: 'claude-sonnet-4-5', apiKey: 'k', headers: { 'anthropic-beta': apiKey } })]) {
      assert.throws(make, (error: Error) => {
        assert.ok(error instanceof TypeError);
        assert.match(error.message, /^anthropicModel: (apiKey|headers) holds/);
        assert.doesNotMatch(error.message, /SECRET/);
        return true;
      });
    }
  }
});

test('a provider that keeps its body open after message_stop has its connection closed about a second later', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: STREAM, after: 'hold' }));
  const outcome = await collect(model(fake.url));
  assert.equal(outcome.error, undefined);
  assert.equal(outcome.chunks.join(''), 'Hello!');
  let deadline: ReturnType<typeof setTimeout> | undefined;
  t.after(() => clearTimeout(deadline));
  const expired = new Promise<string>((resolve) => (deadline = setTimeout(() => resolve('still open after 5 s'), 5000)));
  assert.deepEqual(await Promise.race([fake.requests[0]?.closed, expired]), { finished: false });
});
