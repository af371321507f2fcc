/**
 * openAIModel with tools, against a fake Chat Completions server.
 * test/fixtures/openai-tools-stream.sse holds the `delta.tool_calls`
 * fragments of OpenAI's function-calling guide (section "Streaming",
 * get_weather for Paris) byte for byte, each in the chunk envelope of the
 * API reference's streaming example, then `finish_reason: "tool_calls"`,
 * the usage chunk and `[DONE]`.
 */
import assert from 'node:assert/strict';
import test from 'node:test';
import { openAIModel } from '../../src/models/openai.ts';
import type { ChatMessage, ToolDefinition } from '../../src/types.ts';
import { collect, fakeProvider, fixture, SPLITS, splittingFetch } from './models-fake-provider.ts';

const STREAM = fixture('openai-tools-stream.sse');
const PARIS = { id: 'call_DdmO9pD3xa9XTPNJ32zg2hcA', name: 'get_weather', arguments: '{"location":"Paris, France"}' };
const WEATHER: ToolDefinition = {
  name: 'get_weather',
  description: 'Get current temperature for a given location.',
  parameters: { type: 'object', properties: { location: { type: 'string', description: 'City and country e.g. Bogotá, Colombia' } }, required: ['location'], additionalProperties: false },
};
const model = (url: string, extra: Partial<Parameters<typeof openAIModel>[0]> = {}) =>
  openAIModel({ model: 'gpt-4o-mini', apiKey: 'sk-test', baseURL: `${url}/v1`, maxRetries: 0, ...extra });

const chunk = (delta: unknown, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o-mini', choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;

test('assembles the documented tool-call stream, split mid-line and mid-JSON, into one call; sends tools as functions', async (t) => {
  for (const body of [STREAM, STREAM.replaceAll('\n', '\r\n')]) {
    const fake = await fakeProvider(t, () => ({ body, pieces: SPLITS }));
    for (const fetch of [globalThis.fetch, splittingFetch([1, 2, 3])]) {
      const outcome = await collect(model(fake.url, { fetch }), { tools: [WEATHER], messages: [{ role: 'user', content: "What's the weather like in Paris today?" }] });
      assert.equal(outcome.error, undefined);
      assert.deepEqual(outcome.chunks, []);
      assert.deepEqual(outcome.toolCalls, [PARIS]);
      assert.deepEqual(outcome.usage, { inputTokens: 62, outputTokens: 16, totalTokens: 78 });
      assert.equal(outcome.truncated, false);
    }
  }
});

test('the request carries tools in the Chat Completions shape', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: STREAM }));
  await collect(model(fake.url), { tools: [WEATHER] });
  assert.deepEqual(fake.requests[0]?.body['tools'], [{ type: 'function', function: { name: 'get_weather', description: WEATHER.description, parameters: WEATHER.parameters } }]);
  const plain = await fakeProvider(t, () => ({ body: STREAM }));
  await collect(model(plain.url), { tools: [] });
  assert.equal('tools' in (plain.requests[0]?.body ?? {}), false, 'no tools field without tools');
});

test('arguments split inside a UTF-8 character arrive whole', async (t) => {
  const body = STREAM.replace('"Paris"', '"Bogotá 👋"');
  assert.notEqual(body, STREAM);
  const fake = await fakeProvider(t, () => ({ body, pieces: [1] }));
  const outcome = await collect(model(fake.url, { fetch: splittingFetch([1, 2]) }));
  assert.deepEqual(outcome.toolCalls, [{ ...PARIS, arguments: '{"location":"Bogotá 👋, France"}' }]);
});

test('several calls in one step, interleaved by index, after the text, in index order', async (t) => {
  const body =
    chunk({ role: 'assistant', content: 'Checking both.' }) +
    chunk({ tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '' } }] }) +
    chunk({ tool_calls: [{ index: 1, id: 'call_b', type: 'function', function: { name: 'get_time', arguments: '{"tz":' } }] }) +
    chunk({ tool_calls: [{ index: 0, function: { arguments: '{"location":"Paris"}' } }] }) +
    chunk({ tool_calls: [{ index: 1, function: { arguments: '"CET"}' } }] }) +
    chunk({}, 'tool_calls') +
    'data: [DONE]\n\n';
  const fake = await fakeProvider(t, () => ({ body, pieces: [7] }));
  const outcome = await collect(model(fake.url));
  assert.deepEqual(outcome.sequence, [
    'Checking both.',
    { toolCall: { id: 'call_a', name: 'get_weather', arguments: '{"location":"Paris"}' } },
    { toolCall: { id: 'call_b', name: 'get_time', arguments: '{"tz":"CET"}' } },
  ]);
});

test('compatible servers: every call at index 0 with its own id (Ollama), a whole call with no index, no finish_reason before [DONE]', async (t) => {
  const body =
    chunk({ tool_calls: [{ index: 0, id: 'call_1', function: { name: 'a', arguments: '{}' } }] }) +
    chunk({ tool_calls: [{ index: 0, id: 'call_2', function: { name: 'b', arguments: '{"x":1}' } }] }) +
    chunk({ tool_calls: [{ id: 'call_3', function: { name: 'c', arguments: '{}' } }] }) +
    'data: [DONE]\n\n';
  const fake = await fakeProvider(t, () => ({ body }));
  const outcome = await collect(model(fake.url));
  assert.equal(outcome.error, undefined);
  assert.deepEqual(outcome.toolCalls.map((call) => [call.id, call.name, call.arguments]), [['call_1', 'a', '{}'], ['call_2', 'b', '{"x":1}'], ['call_3', 'c', '{}']]);
});

test('a call without an id gets one; a call without a name is a bad response', async (t) => {
  const noId = await fakeProvider(t, () => ({ body: chunk({ tool_calls: [{ index: 0, function: { name: 'a', arguments: '{}' } }] }, 'tool_calls') }));
  const [call] = (await collect(model(noId.url))).toolCalls;
  assert.match(call?.id ?? '', /^call_[0-9a-f]{32}$/);
  const noName = await fakeProvider(t, () => ({ body: chunk({ tool_calls: [{ index: 0, id: 'x', function: { arguments: '{}' } }] }, 'tool_calls') }));
  const outcome = await collect(model(noName.url));
  assert.equal((outcome.error as { code?: string }).code, 'model_bad_response');
});

test('a whole chat.completion with tool_calls (a server that ignored stream: true) yields the calls', async (t) => {
  const completion = {
    id: 'chatcmpl-1', object: 'chat.completion', created: 1, model: 'gpt-4o-mini',
    choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: [{ id: 'call_x', type: 'function', function: { name: 'get_weather', arguments: '{"location":"Paris"}' } }] }, finish_reason: 'tool_calls' }],
  };
  const fake = await fakeProvider(t, () => ({ headers: { 'content-type': 'application/json' }, body: JSON.stringify(completion) }));
  const outcome = await collect(model(fake.url));
  assert.deepEqual(outcome.toolCalls, [{ id: 'call_x', name: 'get_weather', arguments: '{"location":"Paris"}' }]);
});

test('history with tool calls and results goes out as the guide shows: assistant tool_calls (content null), then one tool message per call', async (t) => {
  const history: ChatMessage[] = [
    { role: 'user', content: "What's the weather like in Paris and Bogotá today?" },
    {
      role: 'assistant',
      content: '',
      toolCalls: [PARIS, { id: 'call_2', name: 'get_weather', arguments: '{"location":"Bogotá, Colombia"}' }],
      usage: { inputTokens: 1 },
    },
    { role: 'tool', toolCallId: PARIS.id, name: 'get_weather', content: '{"temperature":14}' },
    { role: 'tool', toolCallId: 'call_2', name: 'get_weather', content: 'No data for Bogotá', isError: true },
    { role: 'assistant', content: 'Paris: 14°C; Bogotá: no data.', toolCalls: [] },
    { role: 'user', content: 'And tomorrow?' },
    { role: 'assistant', content: 'Let me check.', toolCalls: [{ id: 'call_3', name: 'get_weather', arguments: '{"location":"Paris"}' }] },
    { role: 'tool', toolCallId: 'call_3', name: 'get_weather', content: '' },
  ];
  const fake = await fakeProvider(t, () => ({ body: STREAM }));
  await collect(model(fake.url), { system: 'Be brief.', messages: history, tools: [WEATHER] });
  assert.deepEqual(fake.requests[0]?.body['messages'], [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: "What's the weather like in Paris and Bogotá today?" },
    {
      role: 'assistant',
      content: null,
      tool_calls: [
        { id: 'call_DdmO9pD3xa9XTPNJ32zg2hcA', type: 'function', function: { name: 'get_weather', arguments: '{"location":"Paris, France"}' } },
        { id: 'call_2', type: 'function', function: { name: 'get_weather', arguments: '{"location":"Bogotá, Colombia"}' } },
      ],
    },
    { role: 'tool', tool_call_id: 'call_DdmO9pD3xa9XTPNJ32zg2hcA', content: '{"temperature":14}' },
    { role: 'tool', tool_call_id: 'call_2', content: 'No data for Bogotá' },
    { role: 'assistant', content: 'Paris: 14°C; Bogotá: no data.' },
    { role: 'user', content: 'And tomorrow?' },
    { role: 'assistant', content: 'Let me check.', tool_calls: [{ id: 'call_3', type: 'function', function: { name: 'get_weather', arguments: '{"location":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_3', content: '' },
  ]);
});
