/**
 * anthropicModel with tools, against a fake Messages server.
 * test/fixtures/anthropic-tools-stream.sse is the response of the streaming
 * guide's "Streaming request with tool use" example (get_weather for San
 * Francisco), byte for byte.
 */
import assert from 'node:assert/strict';
import test from 'node:test';
import { anthropicModel } from '../../src/models/anthropic.ts';
import type { ChatMessage, ToolDefinition } from '../../src/types.ts';
import { collect, fakeProvider, fixture, SPLITS, splittingFetch } from './models-fake-provider.ts';

const STREAM = fixture('anthropic-tools-stream.sse');
const TEXT = "Okay, let's check the weather for San Francisco, CA:";
const CALL = { id: 'toolu_01T1x1fJ34qAmk2tNTrN7Up6', name: 'get_weather', arguments: '{"location": "San Francisco, CA", "unit": "fahrenheit"}' };
const WEATHER: ToolDefinition = {
  name: 'get_weather',
  description: 'Get the current weather in a given location',
  parameters: { type: 'object', properties: { location: { type: 'string', description: 'The city and state, e.g. San Francisco, CA' } }, required: ['location'] },
};
const model = (url: string, extra: Partial<Parameters<typeof anthropicModel>[0]> = {}) =>
  anthropicModel({ model: 'claude-opus-4-6', apiKey: 'sk-ant-test', baseURL: `${url}/v1`, maxRetries: 0, ...extra });

const event = (data: Record<string, unknown>) => `event: ${String(data['type'])}\ndata: ${JSON.stringify(data)}\n\n`;
const START = event({ type: 'message_start', message: { id: 'msg_1', type: 'message', role: 'assistant', content: [], usage: { input_tokens: 10, output_tokens: 1 } } });
const END = event({ type: 'message_delta', delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 20 } }) + event({ type: 'message_stop' });

test('assembles the documented tool-use stream, split mid-line and mid-JSON: the text, then the call whole', async (t) => {
  for (const body of [STREAM, STREAM.replaceAll('\n', '\r\n')]) {
    const fake = await fakeProvider(t, () => ({ body, pieces: SPLITS }));
    for (const fetch of [globalThis.fetch, splittingFetch([1, 2, 3])]) {
      const outcome = await collect(model(fake.url, { fetch }), { tools: [WEATHER], messages: [{ role: 'user', content: 'What is the weather like in San Francisco?' }] });
      assert.equal(outcome.error, undefined);
      assert.equal(outcome.chunks.join(''), TEXT);
      assert.deepEqual(outcome.toolCalls, [CALL]);
      assert.deepEqual(outcome.sequence.at(-2), { toolCall: CALL }, 'the call comes after the text, before usage');
      assert.deepEqual(outcome.usage, { inputTokens: 472, outputTokens: 89, totalTokens: 561 });
      assert.equal(outcome.truncated, false, 'stop_reason tool_use is a whole step');
    }
  }
});

test('the request carries tools with input_schema', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: STREAM }));
  await collect(model(fake.url), { tools: [WEATHER] });
  assert.deepEqual(fake.requests[0]?.body['tools'], [{ name: 'get_weather', description: WEATHER.description, input_schema: WEATHER.parameters }]);
  const plain = await fakeProvider(t, () => ({ body: STREAM }));
  await collect(model(plain.url));
  assert.equal('tools' in (plain.requests[0]?.body ?? {}), false);
});

test('input split inside a UTF-8 character arrives whole', async (t) => {
  const body = STREAM.replace('" Francisc"', '" Françis 👋c"');
  assert.notEqual(body, STREAM);
  const fake = await fakeProvider(t, () => ({ body, pieces: [1] }));
  const outcome = await collect(model(fake.url, { fetch: splittingFetch([1, 2]) }));
  assert.deepEqual(outcome.toolCalls, [{ ...CALL, arguments: CALL.arguments.replace('Francisco', 'Françis 👋co') }]);
});

test('parallel tool_use blocks, a tool without input ({}), and a server tool block that is not ours', async (t) => {
  const body =
    START +
    event({ type: 'content_block_start', index: 0, content_block: { type: 'tool_use', id: 'toolu_a', name: 'get_weather', input: {} } }) +
    event({ type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: 'toolu_b', name: 'get_time', input: {} } }) +
    event({ type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '{"location": ' } }) +
    event({ type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '' } }) +
    event({ type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '"Paris"}' } }) +
    event({ type: 'content_block_stop', index: 1 }) +
    event({ type: 'content_block_stop', index: 0 }) +
    event({ type: 'content_block_start', index: 2, content_block: { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: {} } }) +
    event({ type: 'content_block_delta', index: 2, delta: { type: 'input_json_delta', partial_json: '{"query": "x"}' } }) +
    event({ type: 'content_block_stop', index: 2 }) +
    END;
  const fake = await fakeProvider(t, () => ({ body, pieces: [5] }));
  const outcome = await collect(model(fake.url));
  assert.equal(outcome.error, undefined);
  assert.deepEqual(outcome.toolCalls, [
    { id: 'toolu_b', name: 'get_time', arguments: '{}' },
    { id: 'toolu_a', name: 'get_weather', arguments: '{"location": "Paris"}' },
  ]);
});

test('a whole message with tool_use blocks (a gateway that ignored stream: true) yields the text and the calls', async (t) => {
  const message = {
    id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-opus-4-6', stop_reason: 'tool_use', usage: { input_tokens: 5, output_tokens: 6 },
    content: [{ type: 'text', text: 'Checking.' }, { type: 'tool_use', id: 'toolu_x', name: 'get_weather', input: { location: 'Paris' } }],
  };
  const fake = await fakeProvider(t, () => ({ headers: { 'content-type': 'application/json' }, body: JSON.stringify(message) }));
  const outcome = await collect(model(fake.url));
  assert.deepEqual(outcome.chunks, ['Checking.']);
  assert.deepEqual(outcome.toolCalls, [{ id: 'toolu_x', name: 'get_weather', arguments: '{"location":"Paris"}' }]);
});

test('a tool_use block without its id is a bad response', async (t) => {
  const body = START + event({ type: 'content_block_start', index: 0, content_block: { type: 'tool_use', name: 'x', input: {} } }) + END;
  const fake = await fakeProvider(t, () => ({ body }));
  assert.equal(((await collect(model(fake.url))).error as { code?: string }).code, 'model_bad_response');
});

test('history with tool calls and results goes out as the tool-use guide requires: tool_use blocks, then all results of a step in one user message', async (t) => {
  const history: ChatMessage[] = [
    { role: 'user', content: 'What is the weather like in San Francisco and Paris?' },
    {
      role: 'assistant',
      content: TEXT,
      toolCalls: [CALL, { id: 'toolu_2', name: 'get_weather', arguments: '{"location": "Paris"}' }],
      usage: { inputTokens: 472, outputTokens: 89 },
    },
    { role: 'tool', toolCallId: CALL.id, name: 'get_weather', content: '15 degrees' },
    { role: 'tool', toolCallId: 'toolu_2', name: 'get_weather', content: 'ConnectionError: the weather service is not available (HTTP 500)', isError: true },
    { role: 'assistant', content: 'San Francisco: 15 degrees. Paris: unavailable.' },
    { role: 'user', content: 'And tomorrow?' },
    { role: 'assistant', content: '', toolCalls: [{ id: 'toolu_3', name: 'get_weather', arguments: '{"location": "San Fr' }] },
    { role: 'tool', toolCallId: 'toolu_3', name: 'get_weather', content: 'The arguments are not valid JSON', isError: true },
    { role: 'assistant', content: '', toolCalls: [{ id: 'toolu_4', name: 'get_time', arguments: '' }] },
    { role: 'tool', toolCallId: 'toolu_4', name: 'get_time', content: '' },
  ];
  const fake = await fakeProvider(t, () => ({ body: STREAM }));
  await collect(model(fake.url), { system: 'Be brief.', messages: history, tools: [WEATHER] });
  const body = fake.requests[0]?.body;
  assert.equal(body?.['system'], 'Be brief.');
  assert.deepEqual(body?.['messages'], [
    { role: 'user', content: 'What is the weather like in San Francisco and Paris?' },
    {
      role: 'assistant',
      content: [
        { type: 'text', text: TEXT },
        { type: 'tool_use', id: 'toolu_01T1x1fJ34qAmk2tNTrN7Up6', name: 'get_weather', input: { location: 'San Francisco, CA', unit: 'fahrenheit' } },
        { type: 'tool_use', id: 'toolu_2', name: 'get_weather', input: { location: 'Paris' } },
      ],
    },
    {
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: 'toolu_01T1x1fJ34qAmk2tNTrN7Up6', content: '15 degrees' },
        { type: 'tool_result', tool_use_id: 'toolu_2', content: 'ConnectionError: the weather service is not available (HTTP 500)', is_error: true },
      ],
    },
    { role: 'assistant', content: 'San Francisco: 15 degrees. Paris: unavailable.' },
    { role: 'user', content: 'And tomorrow?' },
    { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_3', name: 'get_weather', input: {} }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_3', content: 'The arguments are not valid JSON', is_error: true }] },
    { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_4', name: 'get_time', input: {} }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_4' }] },
  ]);
});
