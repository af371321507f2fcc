import assert from 'node:assert/strict';
import test from 'node:test';
import { ModelProviderError } from '../../src/errors.ts';
import { anthropicModel } from '../../src/models/anthropic.ts';
import { modelFromEnv } from '../../src/models/from-env.ts';
import type { Model, ModelChunk } from '../../src/models/model.ts';
import { openAIModel } from '../../src/models/openai.ts';
import { parseRetryAfter, providerMessage, redact } from '../../src/models/provider-reply.ts';
import { retryDelay } from '../../src/models/provider-http.ts';

/** A `fetch` that answers every call with `respond()` and records the calls. */
function stubFetch(respond: () => Response): typeof fetch & { calls: Array<{ url: string; init: RequestInit | undefined }> } {
  const calls: Array<{ url: string; init: RequestInit | undefined }> = [];
  const stub = (async (input: string | URL | Request, init?: RequestInit) => {
    calls.push({ url: String(input), init });
    return respond();
  }) as typeof fetch & { calls: typeof calls };
  stub.calls = calls;
  return stub;
}

const sse = (text: string, status = 200): Response =>
  new Response(text, { status, headers: { 'content-type': 'text/event-stream' } });

async function run(model: Model): Promise<{ chunks: ModelChunk[]; error: unknown }> {
  const chunks: ModelChunk[] = [];
  try {
    for await (const chunk of model.stream({ system: undefined, messages: [{ role: 'user', content: 'hi' }], signal: new AbortController().signal })) {
      chunks.push(chunk);
    }
    return { chunks, error: undefined };
  } catch (error) {
    return { chunks, error };
  }
}

test('parseRetryAfter reads seconds, an HTTP date and retry-after-ms', () => {
  const now = Date.parse('2025-01-01T00:00:00Z');
  assert.equal(parseRetryAfter(new Headers({ 'retry-after': '0' }), now), 0);
  assert.equal(parseRetryAfter(new Headers({ 'retry-after': '2.5' }), now), 2.5);
  assert.equal(parseRetryAfter(new Headers({ 'retry-after': 'Wed, 01 Jan 2025 00:00:07 GMT' }), now), 7);
  assert.equal(parseRetryAfter(new Headers({ 'retry-after': 'Tue, 31 Dec 2024 00:00:00 GMT' }), now), 0);
  assert.equal(parseRetryAfter(new Headers({ 'retry-after-ms': '1500', 'retry-after': '9' }), now), 1.5);
  assert.equal(parseRetryAfter(new Headers({ 'retry-after': '-1' }), now), undefined);
  assert.equal(parseRetryAfter(new Headers({ 'retry-after': 'soon' }), now), undefined);
  assert.equal(parseRetryAfter(new Headers({ 'retry-after': ' ' }), now), undefined);
  assert.equal(parseRetryAfter(new Headers({ 'retry-after-ms': '', 'retry-after': '9' }), now), 9);
  assert.equal(parseRetryAfter(new Headers({ 'retry-after-ms': 'soon', 'retry-after': '9' }), now), 9);
  assert.equal(parseRetryAfter(new Headers(), now), undefined);
});

test('retryDelay honours a sane Retry-After, else backs off exponentially with jitter, capped', () => {
  assert.equal(retryDelay(0, 0), 0);
  assert.equal(retryDelay(3, 12), 12_000);
  assert.equal(retryDelay(0, 3600, () => 0), 500, 'an hour is not waited for; the backoff is used');
  assert.deepEqual([0, 1, 2, 3, 4, 5].map((n) => retryDelay(n, undefined, () => 0)), [500, 1000, 2000, 4000, 8000, 8000]);
  assert.equal(retryDelay(1, undefined, () => 1), 750, 'jitter takes off at most a quarter');
});

test('providerMessage reads nested errors, bare strings and plain text', () => {
  assert.deepEqual(providerMessage('{"error": {"message": "m", "type": "t"}}'), { message: 'm', type: 't' });
  assert.deepEqual(providerMessage('{"error": "model \\"x\\" not found"}'), { message: 'model "x" not found', type: undefined });
  assert.deepEqual(providerMessage('<html>Bad Gateway</html>'), { message: '<html>Bad Gateway</html>', type: undefined });
  assert.deepEqual(providerMessage(''), { message: undefined, type: undefined });
  // Compatible servers that do not nest: Mistral and vLLM, FastAPI's detail.
  assert.deepEqual(providerMessage('{"object": "error", "message": "extra fields not permitted", "type": "invalid_request_error"}'), { message: 'extra fields not permitted', type: 'invalid_request_error' });
  assert.deepEqual(providerMessage('{"detail": "x"}'), { message: 'x', type: undefined });
  assert.deepEqual(providerMessage('{"detail": [{"loc": ["body"], "msg": "bad"}]}'), { message: '[{"loc":["body"],"msg":"bad"}]', type: undefined });
  assert.deepEqual(providerMessage('{"error": {"code": 1}}'), { message: undefined, type: undefined });
});

test('redact removes the key, any part of it 8 characters long, and what looks like a key', () => {
  assert.equal(redact('bad key abc123SECRET here', ['abc123SECRET']), 'bad key [redacted] here');
  assert.equal(redact('Incorrect API key provided: sk-proj-****abcd.', []), 'Incorrect API key provided: [redacted]');
  assert.equal(redact('a task-force', ['']), 'a task-force');
  // A placeholder shorter than 8 characters is no secret: cutting it everywhere garbled the message.
  assert.equal(redact('text content blocks must be non-empty', ['k']), 'text content blocks must be non-empty');
  assert.equal(redact('EMPTY is not a valid key for model ollama', ['EMPTY', 'ollama']), 'EMPTY is not a valid key for model ollama');
  assert.equal(redact('bad key 12345678 here', ['12345678']), 'bad key [redacted] here');
  // Echoed in part: cut by the 300-character limit, masked in the middle, upper-cased.
  const key = 'gsk_LIVE0123456789abcdefSECRET';
  assert.equal(redact('bad key gsk_LIVE012', [key]), 'bad key [redacted]');
  assert.equal(redact('bad key gsk_L', [key]), 'bad key [redacted]', 'what a cut left of its start');
  assert.equal(redact('the model gpt-4o was not found', [key]), 'the model gpt-4o was not found');
  // A placeholder key is cut out whole, but its words stay in the message; short key-like words stay too.
  assert.equal(redact("'messages' is required; key sk-no-key-required", ['sk-no-key-required']), "'messages' is required; key [redacted]");
  assert.equal(redact('unknown option hf_model or sk_level', [key]), 'unknown option hf_model or sk_level');
  assert.equal(redact('key gsk_LIVE0123456789ab...CRET is invalid', [key]), 'key [redacted] is invalid');
  assert.equal(redact('key GSK_LIVE0123456789ABCDEFSECRET', [key]), 'key [redacted]');
  assert.equal(redact('key xai-AAAABBBBCCCC, model gpt-4o-mini, https://api.example.com/v1', []), 'key [redacted], model gpt-4o-mini, https://api.example.com/v1');
});

test('an error page that is not JSON still reaches the message, cut short', async () => {
  const fetch = stubFetch(() => new Response(`<html>${'x'.repeat(1000)}</html>`, { status: 502 }));
  const { error } = await run(openAIModel({ model: 'm', fetch, maxRetries: 0 }));
  assert.ok(error instanceof ModelProviderError);
  assert.equal(error.code, 'model_unavailable');
  assert.match(error.message, /HTTP 502 \(<html>x+\); the provider failed/);
  assert.ok(error.message.length < 500);
});

test('a 200 JSON error body is reported as a bad response with its message', async () => {
  const fetch = stubFetch(() => Response.json({ error: { message: 'model is loading', type: 'unavailable' } }));
  const { error } = await run(openAIModel({ model: 'm', fetch }));
  assert.ok(error instanceof ModelProviderError);
  assert.equal(error.code, 'model_bad_response');
  assert.match(error.message, /model is loading/);
});

test('an OpenAI-compatible error chunk with an HTTP code keeps that code as the provider status, and its error code', async () => {
  const body = 'data: {"error": {"object": "error", "message": "overloaded", "type": "ServiceUnavailableError", "code": 503}}\n\n';
  const { error } = await run(openAIModel({ model: 'm', fetch: stubFetch(() => sse(body)), maxRetries: 0 }));
  assert.ok(error instanceof ModelProviderError);
  assert.equal(error.code, 'model_unavailable');
  assert.equal(error.providerStatus, 503);
  assert.equal(error.retryable, true);
});

test('a stream error event without details still gives a typed error', async () => {
  const { error } = await run(anthropicModel({ model: 'm', apiKey: 'k', fetch: stubFetch(() => sse('event: error\ndata: {"type": "error"}\n\n')) }));
  assert.ok(error instanceof ModelProviderError);
  assert.equal(error.code, 'model_stream_error');
  assert.equal(error.retryable, false);
});

test('data that is JSON but not an object is a bad response', async () => {
  const { error } = await run(openAIModel({ model: 'm', fetch: stubFetch(() => sse('data: [1, 2]\n\n')) }));
  assert.ok(error instanceof ModelProviderError);
  assert.equal(error.code, 'model_bad_response');
});

test('a stream ending after finish_reason without [DONE] is complete (some compatible servers skip it)', async () => {
  const body = 'data: {"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}\n\n';
  assert.deepEqual(await run(openAIModel({ model: 'm', fetch: stubFetch(() => sse(body)) })), { chunks: ['ok'], error: undefined });
});

test('other choices than the first are not mixed into the reply', async () => {
  const body =
    'data: {"choices": [{"index": 1, "delta": {"content": "B"}}, {"index": 0, "delta": {"content": "A"}}]}\n\ndata: [DONE]\n\n';
  assert.deepEqual((await run(openAIModel({ model: 'm', fetch: stubFetch(() => sse(body)) }))).chunks, ['A']);
});

test('an endless line from the provider is cut off as a bad response', async () => {
  const megabyte = new TextEncoder().encode('x'.repeat(1024 * 1024));
  let sent = 0;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (sent++ < 10) controller.enqueue(megabyte);
      else controller.close();
    },
  });
  const fetch = stubFetch(() => new Response(body, { headers: { 'content-type': 'text/event-stream' } }));
  const { error } = await run(openAIModel({ model: 'm', fetch }));
  assert.ok(error instanceof ModelProviderError);
  assert.equal(error.code, 'model_bad_response');
  assert.match(error.message, /too large/);
});

test('models from the environment post to the configured base URL with the configured key', async (t) => {
  const fetch = stubFetch(() => sse('data: [DONE]\n\n'));
  t.mock.method(globalThis, 'fetch', fetch);
  await run(modelFromEnv({ OPENAI_BASE_URL: 'http://127.0.0.1:1/v1/', OPENAI_API_KEY: 'sk-env' }));
  assert.equal(fetch.calls[0]?.url, 'http://127.0.0.1:1/v1/chat/completions');
  assert.equal(new Headers(fetch.calls[0]?.init?.headers).get('authorization'), 'Bearer sk-env');

  const anthropic = stubFetch(() => sse('event: message_stop\ndata: {"type": "message_stop"}\n\n'));
  t.mock.method(globalThis, 'fetch', anthropic);
  const outcome = await run(modelFromEnv({ ANTHROPIC_API_KEY: 'ant-env', ANTHROPIC_BASE_URL: 'http://127.0.0.1:1/v1' }));
  assert.deepEqual(outcome, { chunks: [], error: undefined });
  assert.equal(anthropic.calls[0]?.url, 'http://127.0.0.1:1/v1/messages');
  assert.equal(new Headers(anthropic.calls[0]?.init?.headers).get('x-api-key'), 'ant-env');
});
