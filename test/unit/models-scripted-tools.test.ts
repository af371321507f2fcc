import assert from 'node:assert/strict';
import test from 'node:test';
import type { ModelChunk, ModelRequest } from '../../src/models/model.ts';
import { scriptedModel } from '../../src/models/scripted.ts';
import type { ChatMessage } from '../../src/types.ts';

async function step(model: ReturnType<typeof scriptedModel>, messages: ChatMessage[] = [{ role: 'user', content: 'hi' }]): Promise<ModelChunk[]> {
  const out: ModelChunk[] = [];
  for await (const chunk of model.stream({ system: undefined, messages, signal: new AbortController().signal })) out.push(chunk);
  return out;
}

test('a scripted step calls tools: text first, then each call with its JSON arguments and an id', async () => {
  const model = scriptedModel([
    { text: 'Adding.', toolCalls: [{ name: 'add', arguments: { a: 2, b: 3 } }, { name: 'now', id: 'mine' }] },
    { toolCalls: [{ name: 'add', arguments: '{"a": 2,' }] },
    'It is 5.',
    ['Two ', 'chunks'],
  ]);
  assert.deepEqual(await step(model), [
    'Adding.',
    { toolCall: { id: 'call_0_0', name: 'add', arguments: '{"a":2,"b":3}' } },
    { toolCall: { id: 'mine', name: 'now', arguments: '{}' } },
  ]);
  assert.deepEqual(await step(model), [{ toolCall: { id: 'call_1_0', name: 'add', arguments: '{"a": 2,' } }], 'string arguments go as written, bad JSON too');
  assert.deepEqual(await step(model), ['It is 5.']);
  assert.deepEqual(await step(model), ['Two ', 'chunks']);
  assert.throws(() => model.stream({ system: undefined, messages: [], signal: new AbortController().signal }), /the script has only 4 replies/);
});

test('a function script sees the tool results and the tools, and can return a step', async () => {
  const seen: ModelRequest[] = [];
  const model = scriptedModel((request) => {
    seen.push(request);
    const last = request.messages.at(-1);
    if (last?.role === 'tool') return `The sum is ${last.content}.`;
    return { toolCalls: [{ name: 'add', arguments: { a: 2, b: 3 } }] };
  });
  assert.deepEqual(await step(model), [{ toolCall: { id: 'call_0_0', name: 'add', arguments: '{"a":2,"b":3}' } }]);
  const history: ChatMessage[] = [
    { role: 'user', content: 'hi' },
    { role: 'assistant', content: '', toolCalls: [{ id: 'call_0_0', name: 'add', arguments: '{"a":2,"b":3}' }] },
    { role: 'tool', toolCallId: 'call_0_0', name: 'add', content: '5' },
  ];
  assert.deepEqual(await step(model, history), ['The sum is 5.']);
  assert.equal(seen.length, 2);
});

test('a step without a tool name is refused, naming the fix', async () => {
  const model = scriptedModel([{ toolCalls: [{ arguments: {} } as never] }]);
  await assert.rejects(step(model), /each scripted tool call needs a name/);
});
