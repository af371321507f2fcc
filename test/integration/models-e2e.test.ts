/**
 * The real providers through the whole stack: AgentServer -> router -> Agent
 * -> openAIModel / anthropicModel -> a fake provider replaying the
 * documented streams (CRLF, split mid-line).
 */
import assert from 'node:assert/strict';
import test, { type TestContext } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { anthropicModel } from '../../src/models/anthropic.ts';
import type { Model } from '../../src/models/model.ts';
import { openAIModel } from '../../src/models/openai.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentServer } from '../../src/server/server.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { postJson, streamChat } from '../helpers/http.ts';
import { collectSSE } from '../helpers/sse.ts';
import { collect, fakeProvider, fixture, SPLITS, type FakeReply } from './models-fake-provider.ts';
import { noTurnId } from '../helpers/turns.ts';

const OPENAI_KEY = 'sk-e2e-openai-SECRET';
const ANTHROPIC_KEY = 'sk-ant-e2e-SECRET';

interface Provider {
  name: string;
  stream: string;
  text: string;
  usage: { inputTokens: number; outputTokens: number; totalTokens: number };
  errorBody: string;
  /** A stream in which the model refuses, as the provider documents it. */
  refusal: string;
  /** One event that carries `text`, in the middle of a reply. */
  textEvent: (text: string) => string;
  model: (baseURL: string, extra?: { maxResponseSize?: number }) => Model;
  /** The conversation the fake received, as [role, content] pairs, system first when there is one. */
  conversation: (body: Record<string, unknown>) => Array<[string, string]>;
}

const pairs = (messages: unknown): Array<[string, string]> =>
  (messages as Array<{ role: string; content: string }>).map((m) => [m.role, m.content]);

const providers: Provider[] = [
  {
    name: 'openai',
    stream: fixture('openai-stream.sse'),
    text: 'Hello! How can I help you today?',
    usage: { inputTokens: 9, outputTokens: 10, totalTokens: 19 },
    errorBody: JSON.stringify(JSON.parse(fixture('openai-errors.json'))['401']).replace('{{apiKey}}', OPENAI_KEY),
    refusal: [
      { choices: [{ index: 0, delta: { role: 'assistant', content: null, refusal: '' }, finish_reason: null }] },
      { choices: [{ index: 0, delta: { refusal: "I'm sorry, I can't assist with that." }, finish_reason: null }] },
      { choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] },
    ].map((chunk) => `data: ${JSON.stringify(chunk)}\n\n`).join('') + 'data: [DONE]\n\n',
    textEvent: (text) => `data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: text }, finish_reason: null }] })}\n\n`,
    model: (url, extra = {}) => openAIModel({ model: 'gpt-4o-mini', apiKey: OPENAI_KEY, baseURL: `${url}/v1`, maxRetries: 0, ...extra }),
    conversation: (body) => pairs(body['messages']),
  },
  {
    name: 'anthropic',
    stream: fixture('anthropic-stream.sse'),
    text: 'Hello!',
    usage: { inputTokens: 25, outputTokens: 15, totalTokens: 40 },
    errorBody: JSON.stringify(JSON.parse(fixture('anthropic-errors.json'))['401']),
    // Anthropic's streaming refusal: the text so far, then stop_reason "refusal".
    refusal: fixture('anthropic-stream.sse').replace('"stop_reason": "end_turn"', '"stop_reason": "refusal"'),
    textEvent: (text) => `event: content_block_delta\ndata: ${JSON.stringify({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text } })}\n\n`,
    model: (url, extra = {}) => anthropicModel({ model: 'claude-sonnet-4-5', apiKey: ANTHROPIC_KEY, baseURL: `${url}/v1`, maxRetries: 0, ...extra }),
    conversation: (body) => [['system', String(body['system'])], ...pairs(body['messages'])],
  },
];

async function serve(t: TestContext, provider: Provider, reply: (index: number) => FakeReply, extra: { maxResponseSize?: number } = {}) {
  const fake = await fakeProvider(t, reply);
  const storage = new MemoryStorage();
  const model = provider.model(fake.url, extra);
  class Bot extends Agent {
    constructor(id: string) {
      super(id, { model, system: 'Be brief.', storage });
    }
  }
  const registry = new AgentRegistry();
  registry.register('bot-[0-9]+', Bot);
  // What the operator reads in the log for a failed turn (the client gets only the code).
  const logged: unknown[] = [];
  const server = new AgentServer(registry, { logger: { error: (_message, error) => logged.push(error) } });
  await server.serve(0);
  t.after(() => server.close());
  return { fake, storage, logged, url: `${server.url}/agent/bot-1/chat` };
}

for (const provider of providers) {
  test(`${provider.name}: POST /agent/{id}/chat?stream=true streams the provider's reply and keeps it with its usage`, async (t) => {
    const crlf = provider.stream.replaceAll('\n', '\r\n');
    const { fake, storage, url } = await serve(t, provider, () => ({ body: crlf, pieces: SPLITS }));

    const res = await streamChat(url, 'Hello');
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'text/event-stream');
    const sse = await collectSSE(res);
    assert.equal(sse.text, provider.text);
    assert.equal(sse.events.at(-1)?.event, 'done');

    const record = await storage.load('bot-1');
    assert.deepEqual(record?.messages, [
      { role: 'user', content: 'Hello' },
      { role: 'assistant', content: provider.text, usage: provider.usage },
    ]);

    // The next turn sends the system prompt, the stored history and the new message.
    const second = await postJson(url, { message: 'And you?' });
    assert.deepEqual(noTurnId(second.body), { agent_id: 'bot-1', response: provider.text });
    assert.deepEqual(provider.conversation((await fake.request(1)).body), [
      ['system', 'Be brief.'],
      ['user', 'Hello'],
      ['assistant', provider.text],
      ['user', 'And you?'],
    ]);
  });

  test(`${provider.name}: a provider failure answers 502 JSON without the key and leaves history unchanged`, async (t) => {
    const { storage, url } = await serve(t, provider, () => ({
      status: 401,
      headers: { 'content-type': 'application/json' },
      body: provider.errorBody,
    }));
    const reply = await postJson(url, { message: 'Hello' });
    assert.equal(reply.status, 502);
    assert.equal(reply.body.code, 'model_auth_failed');
    assert.ok(!JSON.stringify(reply.body).includes('SECRET'));
    assert.equal((await storage.load('bot-1'))?.messages.length ?? 0, 0);
  });

  test(`${provider.name}: a provider's 429 answers 502 model_rate_limited with the provider's Retry-After`, async (t) => {
    const { url } = await serve(t, provider, () => ({
      status: 429,
      headers: { 'content-type': 'application/json', 'retry-after': '7' },
      body: provider.errorBody,
    }));
    const reply = await postJson(url, { message: 'Hello' });
    assert.equal(reply.status, 502);
    assert.equal(reply.body.code, 'model_rate_limited');
    assert.equal(reply.headers.get('retry-after'), '7');
  });

  test(`${provider.name}: a connection cut after the first chunk ends the stream with event: error`, async (t) => {
    // The stream up to the end of the event that carries "Hello", then the socket is destroyed.
    const body = provider.stream.slice(0, provider.stream.indexOf('\n\n', provider.stream.indexOf('"Hello"')) + 2);
    const { storage, url } = await serve(t, provider, () => ({ body, after: 'cut' }));
    const sse = await collectSSE(await streamChat(url, 'Hello'));
    assert.equal(sse.events[0]?.data, 'Hello');
    const last = sse.events.at(-1);
    assert.equal(last?.event, 'error');
    assert.deepEqual(JSON.parse(last?.data ?? ''), { error: 'Request failed', code: 'model_stream_interrupted' });
    assert.equal((await storage.load('bot-1'))?.messages.length ?? 0, 0);
  });

  test(`${provider.name}: a refusal ends the turn with model_refused and is not kept, so the next turn is sent without it`, async (t) => {
    const { fake, storage, url } = await serve(t, provider, (index) => ({ body: index === 0 ? provider.refusal : provider.stream }));
    const refused = await collectSSE(await streamChat(url, 'Something refused'));
    const last = refused.events.at(-1);
    assert.equal(last?.event, 'error');
    assert.deepEqual(JSON.parse(last?.data ?? ''), { error: 'Request failed', code: 'model_refused' });
    assert.equal((await storage.load('bot-1'))?.messages.length ?? 0, 0);
    const next = await postJson(url, { message: 'Something else' });
    assert.deepEqual(noTurnId(next.body), { agent_id: 'bot-1', response: provider.text });
    assert.deepEqual(provider.conversation((await fake.request(1)).body), [['system', 'Be brief.'], ['user', 'Something else']]);
  });

  test(`${provider.name}: a reply longer than maxResponseSize fails the turn (502, or event: error) and closes the provider's stream`, async (t) => {
    // 1 MiB of text events from a provider that never ends its stream, against a 64 KiB limit.
    const body = provider.textEvent('x'.repeat(1000)).repeat(1024);
    const { fake, storage, url } = await serve(t, provider, () => ({ body, after: 'hold' }), { maxResponseSize: 64 * 1024 });
    const reply = await postJson(url, { message: 'Hello' });
    assert.equal(reply.status, 502);
    assert.equal(reply.body.code, 'model_bad_response');
    assert.deepEqual(await fake.requests[0]?.closed, { finished: false });
    const sse = await collectSSE(await streamChat(url, 'Hello'));
    const last = sse.events.at(-1);
    assert.equal(last?.event, 'error');
    assert.deepEqual(JSON.parse(last?.data ?? ''), { error: 'Request failed', code: 'model_bad_response' });
    assert.ok(sse.text.length <= 64 * 1024);
    assert.deepEqual(await fake.requests[1]?.closed, { finished: false });
    assert.equal((await storage.load('bot-1'))?.messages.length ?? 0, 0);
  });
}

const openai = providers[0] as Provider;
const openAIChunk = (chunk: object): string => `data: ${JSON.stringify(chunk)}\n\n`;

test('openai: a server that sends "error": null in every chunk (Foundry Local) streams its reply, which is kept', async (t) => {
  const body = [
    { choices: [{ index: 0, delta: { role: 'assistant', content: 'Hello' }, finish_reason: null }], usage: null, error: null },
    { choices: [{ index: 0, delta: { content: '!' }, finish_reason: null }], usage: null, error: null },
    { choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage: null, error: null },
  ].map(openAIChunk).join('') + 'data: [DONE]\n\n';
  const { storage, url } = await serve(t, openai, () => ({ body }));
  const sse = await collectSSE(await streamChat(url, 'Hi'));
  assert.equal(sse.text, 'Hello!');
  assert.equal(sse.events.at(-1)?.event, 'done');
  assert.deepEqual(noTurnId(await postJson(url, { message: 'Again' }).then((reply) => reply.body)), { agent_id: 'bot-1', response: 'Hello!' });
  assert.equal((await storage.load('bot-1'))?.messages.length, 4);
});

test('openai: Gemini\'s error list ([{"error": {...}}]) reaches the log with its message', async (t) => {
  const error = { error: { code: 400, message: 'Invalid JSON payload received. Unknown name "stream_options": Cannot find field.', status: 'INVALID_ARGUMENT' } };
  const { logged, url } = await serve(t, openai, () => ({ status: 400, headers: { 'content-type': 'application/json' }, body: JSON.stringify([error]) }));
  const reply = await postJson(url, { message: 'Hello' });
  assert.equal(reply.status, 502);
  assert.deepEqual(reply.body, { error: 'Request failed', code: 'model_request_rejected' });
  assert.equal(logged.length, 1);
  assert.match(String((logged[0] as Error).message), /HTTP 400 \(Invalid JSON payload received\. Unknown name "stream_options"/);
});

test("openai: OpenRouter's upstream failure reaches the log with the upstream's own message (error.metadata.raw)", async (t) => {
  const error = {
    error: {
      code: 429,
      message: 'Provider returned error',
      // The upstream's own text, newlines and all: the log gets it on one line.
      metadata: { provider_name: 'Venice', raw: 'qwen/qwen3-coder:free is temporarily rate-limited upstream.\nPlease retry shortly.' },
    },
  };
  const { logged, url } = await serve(t, openai, () => ({ status: 429, headers: { 'content-type': 'application/json' }, body: JSON.stringify(error) }));
  const reply = await postJson(url, { message: 'Hello' });
  assert.equal(reply.status, 502);
  assert.deepEqual(reply.body, { error: 'Request failed', code: 'model_rate_limited' });
  assert.match(String((logged[0] as Error).message), /HTTP 429 \(Provider returned error \(Venice: qwen\/qwen3-coder:free is temporarily rate-limited upstream\. Please retry shortly\.\)/);
});

test('openai: a reply DeepSeek cuts for lack of resources (finish_reason insufficient_system_resource) fails the turn instead of being kept as whole', async (t) => {
  const body = [
    { choices: [{ index: 0, delta: { role: 'assistant', content: 'The answer is' }, finish_reason: null }] },
    { choices: [{ index: 0, delta: { content: '' }, finish_reason: 'insufficient_system_resource' }] },
  ].map(openAIChunk).join('') + 'data: [DONE]\n\n';
  const { fake, storage, url } = await serve(t, openai, () => ({ body }));
  const sse = await collectSSE(await streamChat(url, 'Hi'));
  assert.equal(sse.text, 'The answer is');
  const last = sse.events.at(-1);
  assert.equal(last?.event, 'error');
  assert.deepEqual(JSON.parse(last?.data ?? ''), { error: 'Request failed', code: 'model_stream_error' });
  const reply = await postJson(url, { message: 'Hi' });
  assert.equal(reply.status, 502);
  assert.deepEqual(reply.body, { error: 'Request failed', code: 'model_stream_error' });
  assert.equal((await storage.load('bot-1'))?.messages.length ?? 0, 0);
  assert.equal(fake.requests.length, 2);
});

test("openai: Mistral's finish_reason model_length (the context's end) keeps the reply marked truncated; finish_reason error fails the turn", async (t) => {
  const stream = (finish: string): string =>
    [
      { choices: [{ index: 0, delta: { role: 'assistant', content: 'Once upon' }, finish_reason: null }] },
      { choices: [{ index: 0, delta: { content: ' a time' }, finish_reason: null }] },
      { choices: [{ index: 0, delta: { content: '' }, finish_reason: finish }] },
    ].map(openAIChunk).join('') + 'data: [DONE]\n\n';
  const { storage, url } = await serve(t, openai, (index) => ({ body: stream(index === 0 ? 'model_length' : 'error') }));
  const cut = await postJson(url, { message: 'A story' });
  assert.deepEqual(noTurnId(cut.body), { agent_id: 'bot-1', response: 'Once upon a time', truncated: true });
  const sse = await collectSSE(await streamChat(url, 'Another'));
  assert.equal(sse.text, 'Once upon a time');
  assert.equal(sse.events.at(-1)?.event, 'error');
  assert.deepEqual(JSON.parse(sse.events.at(-1)?.data ?? ''), { error: 'Request failed', code: 'model_stream_error' });
  assert.deepEqual(await storage.load('bot-1').then((record) => record?.messages), [
    { role: 'user', content: 'A story' },
    { role: 'assistant', content: 'Once upon a time', truncated: true },
  ]);
});

test('openai: what compatible servers add around the text (Azure, OpenRouter, DeepSeek, vLLM) streams and keeps the content alone', async (t) => {
  const body =
    // Azure: a first chunk with no choices, carrying the prompt's filter results.
    openAIChunk({ id: '', object: '', created: 0, model: '', choices: [], prompt_filter_results: [{ prompt_index: 0, content_filter_results: { hate: { filtered: false, severity: 'safe' } } }] }) +
    // OpenRouter: keepalive comments while the upstream starts.
    ': OPENROUTER PROCESSING\n\n: OPENROUTER PROCESSING\n\n' +
    // DeepSeek and vLLM (reasoning_content), OpenRouter (reasoning): thinking is not the reply.
    openAIChunk({ choices: [{ index: 0, delta: { role: 'assistant', content: null, reasoning_content: 'The user greets me.' }, finish_reason: null }] }) +
    openAIChunk({ choices: [{ index: 0, delta: { content: null, reasoning: 'So I greet back.', reasoning_details: [{ type: 'reasoning.text', text: 'So I greet back.' }] }, finish_reason: null }] }) +
    openAIChunk({ choices: [{ index: 0, delta: { content: 'Hello', refusal: null }, logprobs: null, finish_reason: null, content_filter_results: {} }] }) +
    // No space after the colon: the SSE standard's own form.
    `data:${JSON.stringify({ choices: [{ index: 0, delta: { content: '!' }, finish_reason: null }] })}\n\n` +
    openAIChunk({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }) +
    openAIChunk({ choices: [], usage: { prompt_tokens: 9, completion_tokens: 30, total_tokens: 39, completion_tokens_details: { reasoning_tokens: 28 } } }) +
    'data: [DONE]\n\n';
  const { storage, url } = await serve(t, openai, () => ({ body: body.replaceAll('\n', '\r\n'), pieces: SPLITS }));
  const sse = await collectSSE(await streamChat(url, 'Hi'));
  assert.equal(sse.text, 'Hello!');
  assert.equal(sse.events.at(-1)?.event, 'done');
  assert.deepEqual(await storage.load('bot-1').then((record) => record?.messages.at(-1)), {
    role: 'assistant',
    content: 'Hello!',
    usage: { inputTokens: 9, outputTokens: 30, totalTokens: 39 },
  });
});

test('openai: a server that sends finish_reason "" in every chunk (SenseNova, Hunyuan, Go gateways) and ends the body mid-reply fails the turn instead of keeping the cut reply as whole', async (t) => {
  const chunk = (content: string, finish: string): string => openAIChunk({ choices: [{ index: 0, delta: { content }, finish_reason: finish }] });
  // Cut: the body ends cleanly after the second chunk, with no finish_reason that says why and no [DONE].
  const cut = chunk('The answer', '') + chunk(' is', '');
  // Whole: the same server's complete reply, its last chunk "stop" (and this one skips [DONE], as some do).
  const whole = cut + chunk(' 42.', '') + chunk('', 'stop');
  const { storage, url } = await serve(t, openai, (index) => ({ body: index < 2 ? cut : whole }));
  const reply = await postJson(url, { message: 'Hi' });
  assert.equal(reply.status, 502);
  assert.deepEqual(reply.body, { error: 'Request failed', code: 'model_stream_interrupted' });
  const sse = await collectSSE(await streamChat(url, 'Hi'));
  assert.equal(sse.text, 'The answer is');
  assert.equal(sse.events.at(-1)?.event, 'error');
  assert.deepEqual(JSON.parse(sse.events.at(-1)?.data ?? ''), { error: 'Request failed', code: 'model_stream_interrupted' });
  assert.equal((await storage.load('bot-1'))?.messages.length ?? 0, 0);
  const next = await postJson(url, { message: 'Hi' });
  assert.deepEqual(noTurnId(next.body), { agent_id: 'bot-1', response: 'The answer is 42.' });
});

test('openai: a hand-written compatible proxy that ends with "data: [DONE] " (a trailing space) and sends no finish_reason has its reply kept, as OpenAI\'s SDKs read it', async (t) => {
  const body = [{ choices: [{ index: 0, delta: { content: 'Hello' } }] }, { choices: [{ index: 0, delta: { content: ' there' } }] }].map(openAIChunk).join('') + 'data: [DONE] \n\n';
  const { storage, url } = await serve(t, openai, () => ({ body }));
  const reply = await postJson(url, { message: 'Hi' });
  assert.deepEqual(noTurnId(reply.body), { agent_id: 'bot-1', response: 'Hello there' });
  const sse = await collectSSE(await streamChat(url, 'Hi'));
  assert.equal(sse.text, 'Hello there');
  assert.equal(sse.events.at(-1)?.event, 'done');
  assert.equal((await storage.load('bot-1'))?.messages.length, 4);
});

const anthropic = providers[1] as Provider;
const anthropicEvent = (data: { type: string } & Record<string, unknown>): string => `event: ${data.type}\ndata: ${JSON.stringify(data)}\n\n`;

test('anthropic: extended thinking, redacted thinking, server tools and citations stream and keep the text alone', async (t) => {
  const delta = (index: number, value: object) => anthropicEvent({ type: 'content_block_delta', index, delta: value });
  const block = (index: number, value: object) => anthropicEvent({ type: 'content_block_start', index, content_block: value });
  const body =
    anthropicEvent({ type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', content: [], model: 'claude-sonnet-4-5', stop_reason: null, stop_sequence: null, usage: { input_tokens: 40, output_tokens: 1 } } }) +
    block(0, { type: 'thinking', thinking: '' }) +
    delta(0, { type: 'thinking_delta', thinking: 'The user wants the weather.' }) +
    delta(0, { type: 'signature_delta', signature: 'EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds' }) +
    anthropicEvent({ type: 'content_block_stop', index: 0 }) +
    block(1, { type: 'redacted_thinking', data: 'EmwKAhgBEgy3va3pzix' }) +
    anthropicEvent({ type: 'content_block_stop', index: 1 }) +
    anthropicEvent({ type: 'ping' }) +
    block(2, { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: {} }) +
    delta(2, { type: 'input_json_delta', partial_json: '{"query": "weather' }) +
    delta(2, { type: 'input_json_delta', partial_json: ' Paris"}' }) +
    anthropicEvent({ type: 'content_block_stop', index: 2 }) +
    block(3, { type: 'web_search_tool_result', tool_use_id: 'srvtoolu_1', content: [{ type: 'web_search_result', title: 'Paris', url: 'https://example.com' }] }) +
    anthropicEvent({ type: 'content_block_stop', index: 3 }) +
    block(4, { type: 'text', text: '', citations: [] }) +
    delta(4, { type: 'citations_delta', citation: { type: 'web_search_result_location', cited_text: 'Sunny', url: 'https://example.com' } }) +
    delta(4, { type: 'text_delta', text: 'Sunny' }) +
    delta(4, { type: 'text_delta', text: ' in Paris.' }) +
    anthropicEvent({ type: 'content_block_stop', index: 4 }) +
    anthropicEvent({ type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 120, server_tool_use: { web_search_requests: 1 } } }) +
    anthropicEvent({ type: 'message_stop' });
  const { storage, url } = await serve(t, anthropic, () => ({ body: body.replaceAll('\n', '\r\n'), pieces: SPLITS }));
  const sse = await collectSSE(await streamChat(url, 'Weather in Paris?'));
  assert.equal(sse.text, 'Sunny in Paris.');
  assert.equal(sse.events.at(-1)?.event, 'done');
  assert.deepEqual(await storage.load('bot-1').then((record) => record?.messages.at(-1)), {
    role: 'assistant',
    content: 'Sunny in Paris.',
    usage: { inputTokens: 40, outputTokens: 120, totalTokens: 160 },
  });
});

test("openai: a proxy's HTML error page (Cloudflare's 524) reaches the log as its title, not as the markup it opens with", async (t) => {
  const page =
    '<!DOCTYPE html>\n<!--[if lt IE 7]> <html class="no-js ie6 oldie" lang="en-US"> <![endif]-->\n<!--[if IE 7]>    <html class="no-js ie7 oldie" lang="en-US"> <![endif]-->\n' +
    '<!--[if IE 8]>    <html class="no-js ie8 oldie" lang="en-US"> <![endif]-->\n<!--[if gt IE 8]><!--> <html class="no-js" lang="en-US"> <!--<![endif]-->\n<head>\n' +
    '<meta http-equiv="Content-Type" content="text/html; charset=UTF-8" />\n<meta name="robots" content="noindex, nofollow" />\n<meta name="viewport" content="width=device-width,initial-scale=1" />\n' +
    '<title>api.example.com | 524: A timeout occurred</title>\n<link rel="stylesheet" id="cf_styles-css" href="/cdn-cgi/styles/main.css" />\n</head>\n<body>...</body>\n</html>\n';
  const { logged, url } = await serve(t, openai, () => ({ status: 524, headers: { 'content-type': 'text/html; charset=UTF-8' }, body: page }));
  const reply = await postJson(url, { message: 'Hello' });
  assert.equal(reply.status, 502);
  assert.deepEqual(reply.body, { error: 'Request failed', code: 'model_unavailable' });
  assert.match(String((logged[0] as Error).message), /HTTP 524 \(api\.example\.com \| 524: A timeout occurred\); the provider failed/);
});

test("anthropic: a proxy's error in the OpenAI form (data: {\"error\": ...}, LiteLLM's /v1/messages) fails the turn with its message, not retried as a cut stream", async (t) => {
  const error = { error: { message: 'litellm.BadRequestError: prompt is too long: 210000 tokens > 200000 maximum', type: 'invalid_request_error', param: 'None', code: '400' } };
  const fake = await fakeProvider(t, () => ({ body: `data: ${JSON.stringify(error)}\n\n` }));
  const { logged, url } = await serve(t, anthropic, () => ({ body: `data: ${JSON.stringify(error)}\n\n` }));
  const reply = await postJson(url, { message: 'Hello' });
  assert.equal(reply.status, 502);
  // LiteLLM's code "400" is the status the error would have had as the answer's.
  assert.deepEqual(reply.body, { error: 'Request failed', code: 'model_request_rejected' });
  assert.match(String((logged[0] as Error).message), /invalid_request_error: litellm\.BadRequestError: prompt is too long/);
  // Not retried: the same request would be refused again.
  const outcome = await collect(anthropicModel({ model: 'claude-sonnet-4-5', apiKey: ANTHROPIC_KEY, baseURL: `${fake.url}/v1`, maxRetries: 2 }));
  assert.equal((outcome.error as { code?: string }).code, 'model_request_rejected');
  assert.equal(fake.requests.length, 1);
});

test("openai: Azure's 400 for a prompt its content filter caught (error.code content_filter) answers 502 model_refused, not retried", async (t) => {
  // As Azure OpenAI documents it: the code says the filter, the type is null.
  const error = {
    error: {
      message: "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry.",
      type: null,
      param: 'prompt',
      code: 'content_filter',
      status: 400,
      innererror: { code: 'ResponsibleAIPolicyViolation', content_filter_result: { violence: { filtered: true, severity: 'medium' } } },
    },
  };
  const { fake, logged, url } = await serve(t, openai, () => ({ status: 400, headers: { 'content-type': 'application/json' }, body: JSON.stringify(error) }));
  const reply = await postJson(url, { message: 'Hello' });
  assert.equal(reply.status, 502);
  assert.deepEqual(reply.body, { error: 'Request failed', code: 'model_refused' });
  assert.match(String((logged[0] as Error).message), /HTTP 400 \(The response was filtered due to the prompt triggering Azure OpenAI's content management policy/);
  const outcome = await collect(openAIModel({ model: 'gpt-4o', baseURL: `${fake.url}/v1`, maxRetries: 2 }));
  assert.equal((outcome.error as { code?: string }).code, 'model_refused');
  assert.equal(fake.requests.length, 2, 'one request each: the same prompt would be refused again');
});

test("anthropic: an AWS-style error body from a Bedrock gateway ({\"Message\"} or {\"message\"}, __type) reaches the log with its message", async (t) => {
  const bodies = [
    // AWS's JSON errors: the message capitalised, the type in __type (IAM's refusal has no type).
    [400, { __type: 'ValidationException', Message: 'Malformed input request: #: extraneous key [model] is not permitted, please reformat your input and try again.' }, /HTTP 400 \(ValidationException: Malformed input request: #: extraneous key \[model\]/],
    [403, { Message: 'User: arn:aws:sts::123456789012:assumed-role/app is not authorized to perform: bedrock:InvokeModelWithResponseStream' }, /HTTP 403 \(User: arn:aws:sts::123456789012:assumed-role\/app is not authorized/],
    // API Gateway's own answers.
    [403, { message: 'The security token included in the request is invalid.' }, /HTTP 403 \(The security token included in the request is invalid\.\)/],
  ] as const;
  for (const [status, body, logged] of bodies) {
    const { logged: log, url } = await serve(t, anthropic, () => ({ status, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }));
    const reply = await postJson(url, { message: 'Hello' });
    assert.equal(reply.status, 502);
    assert.match(String((log[0] as Error).message), logged);
  }
});

test('openai: a server that ignores stream: true and answers a whole chat.completion JSON has its reply answered and kept, with usage and the truncated mark', async (t) => {
  const completion = (content: string, finish: string) =>
    JSON.stringify({
      id: 'chatcmpl-1',
      object: 'chat.completion',
      created: 1700000000,
      model: 'gpt-4o-mini',
      choices: [{ index: 0, message: { role: 'assistant', content, refusal: null }, logprobs: null, finish_reason: finish }],
      usage: { prompt_tokens: 9, completion_tokens: 12, total_tokens: 21 },
    });
  const { storage, url } = await serve(t, openai, (index) => ({
    headers: { 'content-type': 'application/json' },
    body: index === 0 ? completion('Hello! How can I help?', 'stop') : completion('Once upon', 'length'),
  }));
  const sse = await collectSSE(await streamChat(url, 'Hi'));
  assert.equal(sse.text, 'Hello! How can I help?');
  assert.equal(sse.events.at(-1)?.event, 'done');
  assert.deepEqual(noTurnId(await postJson(url, { message: 'A story' }).then((reply) => reply.body)), { agent_id: 'bot-1', response: 'Once upon', truncated: true });
  assert.deepEqual(await storage.load('bot-1').then((record) => record?.messages), [
    { role: 'user', content: 'Hi' },
    { role: 'assistant', content: 'Hello! How can I help?', usage: { inputTokens: 9, outputTokens: 12, totalTokens: 21 } },
    { role: 'user', content: 'A story' },
    { role: 'assistant', content: 'Once upon', usage: { inputTokens: 9, outputTokens: 12, totalTokens: 21 }, truncated: true },
  ]);
});

test('anthropic: a gateway that ignores stream: true and answers a whole Messages API JSON has its reply answered and kept, with usage and the truncated mark', async (t) => {
  const message = (text: string, stop: string) =>
    JSON.stringify({
      id: 'msg_1',
      type: 'message',
      role: 'assistant',
      model: 'claude-sonnet-4-5',
      content: [{ type: 'thinking', thinking: 'Greet.', signature: 'sig' }, { type: 'text', text }],
      stop_reason: stop,
      stop_sequence: null,
      usage: { input_tokens: 10, cache_read_input_tokens: 5, output_tokens: 7 },
    });
  const { storage, url } = await serve(t, anthropic, (index) => ({
    headers: { 'content-type': 'application/json' },
    body: index === 0 ? message('Hello!', 'end_turn') : message('Once upon', 'max_tokens'),
  }));
  assert.deepEqual(noTurnId(await postJson(url, { message: 'Hi' }).then((reply) => reply.body)), { agent_id: 'bot-1', response: 'Hello!' });
  assert.deepEqual(noTurnId(await postJson(url, { message: 'A story' }).then((reply) => reply.body)), { agent_id: 'bot-1', response: 'Once upon', truncated: true });
  assert.deepEqual(await storage.load('bot-1').then((record) => record?.messages.slice(1, 2)), [
    { role: 'assistant', content: 'Hello!', usage: { inputTokens: 15, outputTokens: 7, totalTokens: 22 } },
  ]);
});

test('anthropic: an overloaded or rate-limited failure gets the same code whether it came as the HTTP status or as event: error in the stream', async (t) => {
  const stream = fixture('anthropic-stream.sse');
  const preamble = stream.slice(0, stream.indexOf('event: content_block_delta'));
  const firstText = stream.slice(0, stream.indexOf('event: content_block_stop'));
  for (const [status, type, code] of [[529, 'overloaded_error', 'model_unavailable'], [429, 'rate_limit_error', 'model_rate_limited']] as const) {
    const error = JSON.stringify({ type: 'error', error: { type, message: `said ${type}` } });
    const replies: FakeReply[] = [
      { status, headers: { 'content-type': 'application/json' }, body: error },
      { body: `${preamble}event: error\ndata: ${error}\n\n` },
      { body: `${firstText}event: error\ndata: ${error}\n\n` },
    ];
    const { logged, url } = await serve(t, anthropic, (index) => replies[index] as FakeReply);
    // Before the stream, and in it before any text: 502 with the status's code.
    for (let i = 0; i < 2; i++) {
      const reply = await postJson(url, { message: 'Hello' });
      assert.equal(reply.status, 502, type);
      assert.deepEqual(reply.body, { error: 'Request failed', code }, type);
    }
    // After text reached the client: event: error with that code.
    const sse = await collectSSE(await streamChat(url, 'Hello'));
    assert.equal(sse.text, 'Hello!');
    assert.deepEqual(JSON.parse(sse.events.at(-1)?.data ?? ''), { error: 'Request failed', code }, type);
    assert.match(String((logged[2] as Error).message), new RegExp(`${type}: said ${type}`));
  }
});

test('anthropic: a gateway that ends the stream after message_delta with its stop_reason but no message_stop has its reply answered and kept', async (t) => {
  const stream = fixture('anthropic-stream.sse');
  const { storage, url } = await serve(t, anthropic, () => ({ body: stream.slice(0, stream.indexOf('event: message_stop')) }));
  const sse = await collectSSE(await streamChat(url, 'Hi'));
  assert.equal(sse.text, 'Hello!');
  assert.equal(sse.events.at(-1)?.event, 'done');
  assert.deepEqual(await storage.load('bot-1').then((record) => record?.messages), [
    { role: 'user', content: 'Hi' },
    { role: 'assistant', content: 'Hello!', usage: { inputTokens: 25, outputTokens: 15, totalTokens: 40 } },
  ]);
});

test("a key passed through headers (Azure's api-key, a hand-set Authorization, a gateway's x-api-key or X-Auth-Token) that the provider echoes reaches neither the log nor the client", async (t) => {
  const azureKey = '3f9a2c7e8b1d4f60a5c9e2b7d1f04a8c';
  const jwt = 'eyJhbGciOiJIUzI1NiJ9.tok3nPAYLOAD.s1gnature';
  const gatewayKey = 'gw-live-51HfA9bT2xQ0ZkLmN8pR';
  const authToken = 'tkn-0c1d2e3f4a5b6c7d8e9f';
  const status = (message: string): FakeReply => ({ status: 401, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ error: { message, type: 'authentication_error' } }) });
  // What the log says instead: the message, the key cut out ("Bearer", the auth scheme, is no secret and stays).
  const cases: Array<[Provider, FakeReply, string, RegExp]> = [
    [{ ...openai, model: (url) => openAIModel({ model: 'gpt4o', baseURL: `${url}/v1`, headers: { 'api-key': azureKey }, maxRetries: 0 }) }, status(`Access denied: key ${azureKey} is not valid`), azureKey, /Access denied: key \[redacted\] is not valid/],
    [{ ...openai, model: (url) => openAIModel({ model: 'gpt4o', baseURL: `${url}/v1`, headers: { Authorization: `Bearer ${jwt}` }, maxRetries: 0 }) }, status(`Bearer token ${jwt} expired`), jwt, /Bearer token \[redacted\] expired/],
    // Masked as providers do: the start and the end of the key.
    [{ ...anthropic, model: (url) => anthropicModel({ model: 'claude-sonnet-4-5', apiKey: 'placeholder', baseURL: `${url}/v1`, headers: { 'x-api-key': gatewayKey }, maxRetries: 0 }) }, status(`invalid x-api-key: ${gatewayKey.slice(0, 12)}...${gatewayKey.slice(-4)}`), gatewayKey.slice(0, 12), /invalid x-api-key: \[redacted\]/],
    // In the stream, after text: the client gets event: error.
    [{ ...openai, model: (url) => openAIModel({ model: 'gpt4o', baseURL: `${url}/v1`, headers: { 'X-Auth-Token': authToken }, maxRetries: 0 }) },
      { body: openai.textEvent('Hi') + `data: ${JSON.stringify({ error: { message: `token ${authToken} revoked`, code: 401 } })}\n\n` }, authToken, /token \[redacted\] revoked/],
  ];
  for (const [provider, reply, secret, message] of cases) {
    const { logged, url } = await serve(t, provider, () => reply);
    const json = await postJson(url, { message: 'Hello' });
    assert.equal(json.status, 502);
    assert.deepEqual(json.body, { error: 'Request failed', code: 'model_auth_failed' });
    const sse = await collectSSE(await streamChat(url, 'Hello'));
    assert.equal(sse.events.at(-1)?.event, 'error');
    assert.doesNotMatch(JSON.stringify(sse.events), new RegExp(secret.slice(0, 12)));
    assert.equal(logged.length, 2);
    for (const error of logged as Error[]) {
      assert.match(error.message, message);
      assert.doesNotMatch(`${error.message}\n${error.stack}`, new RegExp(secret.slice(0, 12).replace('.', '\\.')), error.message);
    }
  }
});

test("an empty or invalid retry-after-ms is ignored: the provider's valid Retry-After goes on to the client", async (t) => {
  for (const ms of ['', 'soon', '-5']) {
    const { url } = await serve(t, openai, () => ({
      status: 429,
      headers: { 'content-type': 'application/json', 'retry-after-ms': ms, 'retry-after': '7' },
      body: openai.errorBody,
    }));
    const reply = await postJson(url, { message: 'Hello' });
    assert.equal(reply.status, 502);
    assert.equal(reply.body.code, 'model_rate_limited');
    assert.equal(reply.headers.get('retry-after'), '7', JSON.stringify(ms));
  }
  // A valid one still wins, rounded up to whole seconds for the client.
  const { url } = await serve(t, openai, () => ({ status: 429, headers: { 'retry-after-ms': '1500', 'retry-after': '7' }, body: openai.errorBody }));
  assert.equal((await postJson(url, { message: 'Hello' })).headers.get('retry-after'), '2');
});
