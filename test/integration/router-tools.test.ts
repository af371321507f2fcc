import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import type { ToolContext } from '../../src/agent/tools.ts';
import { anthropicModel } from '../../src/models/anthropic.ts';
import type { Model } from '../../src/models/model.ts';
import { openAIModel } from '../../src/models/openai.ts';
import { scriptedModel, type ScriptedFunction } from '../../src/models/scripted.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { AgentServer } from '../../src/server/server.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { HTTPTransport } from '../../src/transports/http.ts';
import { deferred, postJson, streamChat } from '../helpers/http.ts';
import { listen } from '../helpers/listen.ts';
import { collectSSE } from '../helpers/sse.ts';
import { noTurnId, turnIdOf } from '../helpers/turns.ts';
import { fakeProvider, fixture, SPLITS } from './models-fake-provider.ts';

const ADD = {
  description: 'Adds two numbers',
  parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'], additionalProperties: false },
};
const WEATHER = {
  description: 'Get the current weather in a given location',
  parameters: { type: 'object', properties: { location: { type: 'string' }, unit: { type: 'string' } }, required: ['location'] },
};

interface Served {
  url: string;
  storage: MemoryStorage;
  logged: unknown[];
  ran: ToolContext[];
}

/** A router whose agents have `add`, `get_weather` and any extra tools, on the given model. */
async function serve(t: TestContext, model: () => Model, extra: Record<string, unknown> = {}, maxSteps?: number): Promise<Served> {
  const storage = new MemoryStorage();
  const ran: ToolContext[] = [];
  const tools = extra as never;
  class Tooled extends Agent {
    static override tools = { add: ADD, get_weather: WEATHER };
    constructor(id: string) {
      super(id, { model: model(), storage, tools, maxSteps });
    }
    add({ a, b }: { a: number; b: number }, ctx: ToolContext) {
      ran.push(ctx);
      return a + b;
    }
    get_weather({ location }: { location: string }, ctx: ToolContext) {
      ran.push(ctx);
      return { location, temperature: 15 };
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Tooled);
  const logged: unknown[] = [];
  const router = new AgentRouter(registry, { logger: { error: (_m: string, error?: unknown) => void logged.push(error) }, pingInterval: 0 });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  return { url, storage, logged, ran };
}

/** Adds when asked, then says the sum: two steps per turn. */
const adder: ScriptedFunction = (request) => {
  const last = request.messages.at(-1);
  if (last?.role === 'tool') return `It is ${last.content}.`;
  return { text: 'Adding. ', toolCalls: [{ id: 'c1', name: 'add', arguments: { a: 2, b: 3 } }] };
};

const typedEvents = async (res: Response) => (await collectSSE(res)).events.map((e) => ({ event: e.event, data: e.data === '[DONE]' ? e.data : JSON.parse(e.data) }));

test('a two-step tool turn: JSON has tool_calls, the plain stream only text, the typed stream tool.call and tool.result between the deltas', async (t) => {
  const { url, storage, ran } = await serve(t, () => scriptedModel(adder));
  const reply = await postJson(`${url}/calc-1/chat`, { message: '2+3' });
  assert.equal(reply.status, 200);
  turnIdOf(reply.body, reply.headers);
  assert.deepEqual(noTurnId(reply.body), { agent_id: 'calc-1', response: 'Adding. It is 5.', tool_calls: [{ id: 'c1', name: 'add', arguments: { a: 2, b: 3 }, result: 5 }] });
  assert.equal(ran[0]?.agentId, 'calc-1');
  const record = await storage.load('calc-1');
  assert.deepEqual(record?.messages.map((m) => m.role), ['user', 'assistant', 'tool', 'assistant']);

  const plainRes = await streamChat(`${url}/calc-2/chat`, '2+3');
  const plainId = plainRes.headers.get('turn-id');
  const plain = await collectSSE(plainRes);
  assert.equal(plain.text, 'Adding. It is 5.');
  // The tool call and its result count in the seq although the plain stream does not send them.
  assert.deepEqual(plain.events.map((e) => [e.event, e.id]), [['message', `${plainId}:1`], ['message', `${plainId}:4`], ['done', `${plainId}:5`]]);

  const typedRes = await streamChat(`${url}/calc-3/chat`, '2+3', { query: '?stream=events' });
  const typedId = typedRes.headers.get('turn-id');
  const typedRaw = await collectSSE(typedRes);
  assert.deepEqual(typedRaw.events.map((e) => e.id), [1, 2, 3, 4, 5, 6].map((seq) => `${typedId}:${seq}`));
  const typed = typedRaw.events.map((e) => ({ event: e.event, data: JSON.parse(e.data) }));
  assert.deepEqual(typed.map((e) => e.event), ['turn.started', 'text.delta', 'tool.call', 'tool.result', 'text.delta', 'turn.finished']);
  assert.deepEqual(typed[2]?.data, { type: 'tool.call', id: 'c1', name: 'add', arguments: { a: 2, b: 3 } });
  assert.deepEqual(typed[3]?.data, { type: 'tool.result', id: 'c1', name: 'add', result: 5 });
  assert.deepEqual(typed[5]?.data, { type: 'turn.finished', result: { agent_id: 'calc-3', text: 'Adding. It is 5.' } });
});

test('parallel calls, bad arguments the model corrects, and a throwing tool: error results, the full error only in the log', async (t) => {
  const boom = { description: 'Throws', parameters: { type: 'object' }, run: () => { throw new Error('secret detail'); } };
  const model = () =>
    scriptedModel((request) => {
      const tools = request.messages.filter((m) => m.role === 'tool').length;
      if (tools === 0) return { toolCalls: [{ id: 'p1', name: 'add', arguments: { a: 1, b: 2 } }, { id: 'p2', name: 'get_weather', arguments: { location: 'Paris' } }, { id: 'p3', name: 'boom' }, { id: 'p4', name: 'add', arguments: '{"a": 1' }] };
      if (tools === 4) return { toolCalls: [{ id: 'p5', name: 'add', arguments: { a: 1, b: 1 } }] };
      return 'Done.';
    });
  const { url, logged } = await serve(t, model, { boom });
  const reply = await postJson(`${url}/p-1/chat`, { message: 'go' });
  assert.equal(reply.status, 200);
  const calls = reply.body['tool_calls'] as Array<Record<string, unknown>>;
  assert.deepEqual(calls.map((c) => c['id']), ['p1', 'p2', 'p3', 'p4', 'p5']);
  assert.equal(calls[0]?.['result'], 3);
  assert.deepEqual(calls[1]?.['result'], { location: 'Paris', temperature: 15 });
  assert.deepEqual(calls[2]?.['error'], { message: 'The tool boom failed; it gave no details that can be shown', code: 'tool_failed' });
  assert.equal(calls[3]?.['arguments'], '{"a": 1', 'arguments that are not a JSON object go as the raw text');
  assert.equal((calls[3]?.['error'] as { code: string }).code, 'invalid_tool_arguments');
  assert.equal(calls[4]?.['result'], 2);
  assert.ok(!JSON.stringify(reply.body).includes('secret detail'));
  assert.ok(logged.some((e) => e instanceof Error && e.message === 'secret detail'), 'the full error goes to the logger');
});

test('maxSteps: a model that keeps calling tools fails the turn with 500 max_steps_exceeded, and nothing is stored', async (t) => {
  const loop = () => scriptedModel(() => ({ toolCalls: [{ name: 'add', arguments: { a: 1, b: 1 } }] }));
  const { url, storage } = await serve(t, loop, {}, 2);
  const reply = await postJson(`${url}/loop-1/chat`, { message: 'go' });
  assert.equal(reply.status, 500);
  assert.equal(reply.body['code'], 'max_steps_exceeded');
  assert.match(String(reply.body['error']), /after 2 steps/);
  assert.equal(await storage.load('loop-1'), undefined);
  const typed = await typedEvents(await streamChat(`${url}/loop-2/chat`, 'go', { query: '?stream=events' }));
  assert.deepEqual(typed.at(-1)?.data, { type: 'turn.failed', error: reply.body['error'], code: 'max_steps_exceeded' });
});

test('a client that disconnects while a tool runs: the tool signal aborts and nothing is stored (JSON and typed stream)', async (t) => {
  let started = deferred();
  let aborted = deferred();
  const wait = {
    description: 'Waits',
    parameters: { type: 'object' },
    run: (_: unknown, { signal }: ToolContext) =>
      new Promise((_r, reject) => {
        started.resolve();
        signal.addEventListener('abort', () => {
          aborted.resolve();
          reject(signal.reason);
        });
      }),
  };
  const { url, storage } = await serve(t, () => scriptedModel(() => ({ toolCalls: [{ name: 'wait' }] })), { wait });
  for (const query of ['?stream=events', '']) {
    started = deferred();
    aborted = deferred();
    const controller = new AbortController();
    const id = `gone${query === '' ? '-json' : '-sse'}`;
    const request =
      query === ''
        ? fetch(`${url}/${id}/chat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ message: 'go' }), signal: controller.signal })
        : streamChat(`${url}/${id}/chat`, 'go', { query, signal: controller.signal }).then((res) => res.text());
    request.catch(() => {});
    await started.promise;
    controller.abort();
    await aborted.promise;
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(await storage.load(id), undefined, id);
  }
});

for (const provider of ['openai', 'anthropic'] as const) {
  test(`${provider}: a two-step tool turn on the fake provider (JSON, plain and typed streams), and history sent back in the provider's shape`, async (t) => {
    const toolStream = fixture(`${provider}-tools-stream.sse`);
    const textStream = fixture(`${provider}-stream.sse`);
    const fake = await fakeProvider(t, (index) => ({ body: index % 2 === 0 ? toolStream : textStream, pieces: SPLITS }));
    const model = () =>
      provider === 'openai'
        ? openAIModel({ model: 'gpt-4o-mini', apiKey: 'sk-test', baseURL: `${fake.url}/v1`, maxRetries: 0 })
        : anthropicModel({ model: 'claude-opus-4-6', apiKey: 'sk-ant-test', baseURL: `${fake.url}/v1`, maxRetries: 0 });
    const { url } = await serve(t, model);
    const call = provider === 'openai'
      ? { id: 'call_DdmO9pD3xa9XTPNJ32zg2hcA', name: 'get_weather', arguments: { location: 'Paris, France' } }
      : { id: 'toolu_01T1x1fJ34qAmk2tNTrN7Up6', name: 'get_weather', arguments: { location: 'San Francisco, CA', unit: 'fahrenheit' } };
    const prefix = provider === 'openai' ? '' : "Okay, let's check the weather for San Francisco, CA:";
    const final = provider === 'openai' ? 'Hello! How can I help you today?' : 'Hello!';
    const result = { location: call.arguments.location, temperature: 15 };

    const reply = await postJson(`${url}/w-1/chat`, { message: 'Weather?' });
    assert.equal(reply.status, 200, JSON.stringify(reply.body));
    turnIdOf(reply.body, reply.headers);
    assert.deepEqual(noTurnId(reply.body), { agent_id: 'w-1', response: prefix + final, tool_calls: [{ ...call, result }] });
    const plain = await collectSSE(await streamChat(`${url}/w-1/chat`, 'Again?'));
    assert.equal(plain.text, prefix + final);
    const typed = await typedEvents(await streamChat(`${url}/w-1/chat`, 'Once more?', { query: '?stream=events' }));
    const names = typed.map((e) => e.event).filter((e) => e !== 'text.delta');
    assert.deepEqual(names, ['turn.started', 'tool.call', 'tool.result', 'turn.finished']);
    assert.deepEqual(typed.find((e) => e.event === 'tool.result')?.data, { type: 'tool.result', id: call.id, name: call.name, result });

    // The second turn's first request carries the first turn as stored: the call and its result, as the provider documents.
    const sent = (await fake.request(2)).body['messages'] as unknown[];
    if (provider === 'openai') {
      assert.deepEqual(sent.slice(0, 4), [
        { role: 'user', content: 'Weather?' },
        { role: 'assistant', content: null, tool_calls: [{ id: call.id, type: 'function', function: { name: call.name, arguments: '{"location":"Paris, France"}' } }] },
        { role: 'tool', tool_call_id: call.id, content: JSON.stringify(result) },
        { role: 'assistant', content: final },
      ]);
    } else {
      assert.deepEqual(sent.slice(0, 4), [
        { role: 'user', content: 'Weather?' },
        { role: 'assistant', content: [{ type: 'text', text: prefix }, { type: 'tool_use', id: call.id, name: call.name, input: call.arguments }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: JSON.stringify(result) }] },
        { role: 'assistant', content: final },
      ]);
    }
  });
}

test('the remote pair: a front router relays a back AgentServer tool turn (JSON tool_calls, typed events byte for byte)', async (t) => {
  const storage = new MemoryStorage();
  class Calc extends Agent {
    static override tools = { add: ADD };
    constructor(id: string) {
      super(id, { model: scriptedModel(adder), storage });
    }
    add({ a, b }: { a: number; b: number }) {
      return a + b;
    }
  }
  const backRegistry = new AgentRegistry();
  backRegistry.register('.*', Calc);
  const back = new AgentServer(backRegistry, { logger: { error: () => {} }, pingInterval: 0 });
  await back.serve(0);
  t.after(() => back.close());
  const front = new AgentRegistry();
  front.register('.*', new HTTPTransport(`${back.url}/agent`));
  const router = new AgentRouter(front, { logger: { error: () => {} }, pingInterval: 0 });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);

  const reply = await postJson(`${url}/r-1/chat`, { message: '2+3' });
  turnIdOf(reply.body, reply.headers);
  assert.deepEqual(noTurnId(reply.body), { agent_id: 'r-1', response: 'Adding. It is 5.', tool_calls: [{ id: 'c1', name: 'add', arguments: { a: 2, b: 3 }, result: 5 }] });
  const directRes = await streamChat(`${back.url}/agent/r-2/chat`, '2+3', { query: '?stream=events' });
  const directId = directRes.headers.get('turn-id') ?? 'no Turn-Id';
  const direct = await directRes.text();
  const relayedRes = await streamChat(`${url}/r-3/chat`, '2+3', { query: '?stream=events' });
  const relayedId = relayedRes.headers.get('turn-id') ?? 'no Turn-Id';
  const relayed = await relayedRes.text();
  assert.notEqual(relayedId, directId);
  assert.match(relayed, new RegExp(`^event: turn\\.started\nid: ${relayedId}:1\n`), 'the relayed stream carries the remote turn id it names in Turn-Id');
  assert.match(relayed.replaceAll(relayedId, 'TURN'), /event: tool\.call\nid: TURN:3\ndata: \{"type":"tool\.call","id":"c1","name":"add","arguments":\{"a":2,"b":3\}\}/);
  assert.match(relayed.replaceAll(relayedId, 'TURN'), /event: tool\.result\nid: TURN:4\ndata: \{"type":"tool\.result","id":"c1","name":"add","result":5\}/);
  // Byte for byte but for the agent and the turn: each stream names its own.
  assert.equal(relayed.replaceAll('r-3', 'r-2').replaceAll(relayedId, directId), direct);
});

test('the demo: calc-* agents call the calculator and the clock with no key', async (t) => {
  const { demoRegistry } = await import('../../src/cli/demo.ts');
  const router = new AgentRouter(demoRegistry({ storage: new MemoryStorage() }), { logger: { error: () => {} } });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  const sum = await postJson(`${url}/calc-1/chat`, { message: 'What is 2+3?' });
  assert.equal(sum.body['response'], 'Let me calculate that. The answer is 5.');
  assert.deepEqual((sum.body['tool_calls'] as Array<Record<string, unknown>>).map(({ name, arguments: args, result }) => ({ name, args, result })), [{ name: 'calculate', args: { a: 2, op: '+', b: 3 }, result: 5 }]);
  const zero = await postJson(`${url}/calc-1/chat`, { message: '1/0' });
  assert.equal(zero.body['response'], 'Let me calculate that. The calculate tool said: Cannot divide by zero');
  const time = await postJson(`${url}/calc-1/chat`, { message: 'What time is it?' });
  assert.match(String(time.body['response']), /^It is \d{4}-\d\d-\d\dT.* \(UTC\)\.$/);
});
