// OpenTelemetry spans over real sockets, with the real SDK: one trace across a front router, a remote AgentServer and a fake provider.
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouterError } from '../../src/errors.ts';
import { openAIModel } from '../../src/models/openai.ts';
import { scriptedModel } from '../../src/models/scripted.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { AgentServer } from '../../src/server/server.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { HTTPTransport } from '../../src/transports/http.ts';
import { parseTraceparent } from '../../src/lib/trace.ts';
import { deferred, postJson, streamChat } from '../helpers/http.ts';
import { listen } from '../helpers/listen.ts';
import { fakeProvider } from './models-fake-provider.ts';

const quiet = { error: () => {} };

function tracing(): { tracer: ReturnType<BasicTracerProvider['getTracer']>; spans: () => ReadableSpan[] } {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  return { tracer: provider.getTracer('agent-router-test'), spans: () => exporter.getFinishedSpans() };
}

const chunk = (delta: object, finish: string | null = null): string =>
  `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', model: 'gpt-4o-mini', choices: [{ index: 0, delta, finish_reason: finish }], usage: null })}\n\n`;
const OPENAI_BODY =
  chunk({ role: 'assistant', content: 'Hello' }) +
  chunk({}, 'stop') +
  `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', model: 'gpt-4o-mini', choices: [], usage: { prompt_tokens: 9, completion_tokens: 10, total_tokens: 19 } })}\n\ndata: [DONE]\n\n`;

const parentOf = (span: ReadableSpan): string | undefined => span.parentSpanContext?.spanId;
const byName = (spans: ReadableSpan[], name: string): ReadableSpan => {
  const found = spans.find((span) => span.name === name);
  assert.ok(found, `no span named ${name} in ${spans.map((span) => span.name).join(', ')}`);
  return found;
};

async function until(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 5));
}

async function chain(t: TestContext, front: ReturnType<typeof tracing>, back: ReturnType<typeof tracing> | undefined, reply = OPENAI_BODY) {
  const fake = await fakeProvider(t, () => ({ body: reply }));
  const model = openAIModel({ model: 'gpt-4o-mini', baseURL: fake.url, apiKey: 'sk-test', maxRetries: 0 });
  const remote = new AgentRegistry();
  remote.register('bot-.*', class extends Agent {
    constructor(id: string) {
      super(id, { model, storage: new MemoryStorage() });
    }
  });
  const server = await new AgentServer(remote, { logger: quiet, ...(back === undefined ? {} : { tracer: back.tracer }) }).serve(0);
  t.after(() => server.close());
  const registry = new AgentRegistry();
  registry.register('bot-.*', new HTTPTransport(`${server.url}/agent`));
  const router = await listen(new AgentRouter(registry, { logger: quiet, tracer: front.tracer }).toRequestListener());
  t.after(router.close);
  return { fake, url: router.url };
}

test('trace: one trace across a front router, a remote AgentServer and a fake OpenAI provider', async (t) => {
  const front = tracing();
  const back = tracing();
  const { fake, url } = await chain(t, front, back);
  const reply = await postJson(`${url}/bot-1/chat`, { message: 'hi' }, { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', tracestate: 'vendor=x' });
  assert.equal(reply.status, 200);
  await until(() => front.spans().length >= 2 && back.spans().length >= 3);
  const spans = [...front.spans(), ...back.spans()];
  for (const span of spans) assert.equal(span.spanContext().traceId, '0af7651916cd43dd8448eb211c80319c', `${span.name} is in the caller's trace`);

  const frontServer = byName(front.spans(), 'POST /{agent_id}/chat');
  assert.equal(frontServer.kind, SpanKind.SERVER);
  assert.equal(parentOf(frontServer), 'b7ad6b7169203331');
  assert.equal(frontServer.attributes['http.request.method'], 'POST');
  assert.equal(frontServer.attributes['http.route'], '/{agent_id}/chat');
  assert.equal(frontServer.attributes['http.response.status_code'], 200);
  const client = byName(front.spans(), 'POST');
  assert.equal(client.kind, SpanKind.CLIENT);
  assert.equal(parentOf(client), frontServer.spanContext().spanId);
  assert.equal(client.attributes['http.response.status_code'], 200);

  const backServer = byName(back.spans(), 'POST /agent/{agent_id}/chat');
  assert.equal(backServer.kind, SpanKind.SERVER);
  assert.equal(parentOf(backServer), client.spanContext().spanId);
  const turn = byName(back.spans(), 'agent_router.turn chat');
  assert.equal(parentOf(turn), backServer.spanContext().spanId);
  assert.equal(turn.attributes['agent_router.agent_id'], 'bot-1');
  assert.equal(typeof turn.attributes['agent_router.turn_id'], 'string');
  assert.equal(turn.attributes['agent_router.turn.kind'], 'chat');
  const chat = byName(back.spans(), 'chat gpt-4o-mini');
  assert.equal(chat.kind, SpanKind.CLIENT);
  assert.equal(parentOf(chat), turn.spanContext().spanId);
  assert.deepEqual(
    { ...chat.attributes },
    {
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'openai',
      'gen_ai.request.model': 'gpt-4o-mini',
      'gen_ai.usage.input_tokens': 9,
      'gen_ai.usage.output_tokens': 10,
      'gen_ai.response.finish_reasons': ['stop'],
    },
  );
  // The provider hears the model call's span, the tracestate the caller sent, and no other caller header.
  const sent = (await fake.request(0)).headers;
  assert.equal(sent['traceparent'], `00-0af7651916cd43dd8448eb211c80319c-${chat.spanContext().spanId}-01`);
  assert.equal(sent['tracestate'], 'vendor=x');
});

test('trace: with no tracer the incoming traceparent goes on unchanged; an invalid one goes nowhere', async (t) => {
  const fake = await fakeProvider(t, () => ({ body: OPENAI_BODY }));
  const model = openAIModel({ model: 'gpt-4o-mini', baseURL: fake.url, apiKey: 'sk-test', maxRetries: 0 });
  const router = await listen(new AgentRouter(new Agent('solo', { model, storage: new MemoryStorage() }), { logger: quiet }).toRequestListener());
  t.after(router.close);
  const parent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00';
  assert.equal((await postJson(`${router.url}/chat`, { message: 'hi' }, { traceparent: parent })).status, 200);
  assert.equal((await fake.request(0)).headers['traceparent'], parent);
  assert.equal((await postJson(`${router.url}/chat`, { message: 'hi' }, { traceparent: parent.replace('4bf9', '4BF9') })).status, 200);
  assert.equal((await fake.request(1)).headers['traceparent'], undefined);
});

test('trace: a tool call has its execute_tool span under the turn', async (t) => {
  const front = tracing();
  const model = scriptedModel([{ toolCalls: [{ name: 'add', arguments: { a: 1, b: 2 } }] }, 'three']);
  const add = { description: 'Adds', parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } } }, run: ({ a, b }: { a: number; b: number }) => a + b };
  const agent = new Agent('calc', { model, storage: new MemoryStorage(), tools: { add } });
  const router = await listen(new AgentRouter(agent, { logger: quiet, tracer: front.tracer }).toRequestListener());
  t.after(router.close);
  assert.equal((await postJson(`${router.url}/chat`, { message: 'add' })).status, 200);
  await until(() => front.spans().length >= 5);
  const turn = byName(front.spans(), 'agent_router.turn chat');
  const tool = byName(front.spans(), 'execute_tool add');
  assert.equal(parentOf(tool), turn.spanContext().spanId);
  assert.equal(tool.attributes['gen_ai.operation.name'], 'execute_tool');
  assert.equal(tool.attributes['gen_ai.tool.name'], 'add');
  assert.equal(typeof tool.attributes['gen_ai.tool.call.id'], 'string');
  const steps = front.spans().filter((span) => span.attributes['gen_ai.operation.name'] === 'chat');
  assert.equal(steps.length, 2);
  assert.deepEqual(steps.map((span) => span.attributes['gen_ai.response.finish_reasons']), [['tool_calls'], ['stop']]);
  for (const step of steps) assert.equal(parentOf(step), turn.spanContext().spanId);
});

test('trace: a failing provider sets ERROR with the error code on the model, turn and request spans', async (t) => {
  const front = tracing();
  const back = tracing();
  const { url } = await chain(t, front, back, 'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n');
  const reply = await postJson(`${url}/bot-1/chat`, { message: 'hi' });
  assert.ok(reply.status >= 500, `status ${reply.status}`);
  await until(() => front.spans().length >= 2 && back.spans().length >= 3);
  const chat = byName(back.spans(), 'chat gpt-4o-mini');
  assert.equal(chat.status.code, SpanStatusCode.ERROR);
  const code = chat.status.message as string;
  assert.match(code, /^[a-z_]+$/);
  assert.equal(chat.attributes['error.type'], code);
  assert.equal(byName(back.spans(), 'agent_router.turn chat').status.code, SpanStatusCode.ERROR);
  const backServer = byName(back.spans(), 'POST /agent/{agent_id}/chat');
  assert.equal(backServer.status.code, SpanStatusCode.ERROR);
  assert.equal(backServer.attributes['http.response.status_code'], reply.status);
  assert.equal(byName(front.spans(), 'POST').status.code, SpanStatusCode.ERROR);
  // A new trace (no traceparent came in), shared by both sides.
  assert.equal(new Set([...front.spans(), ...back.spans()].map((span) => span.spanContext().traceId)).size, 1);
});

test('trace: under onDisconnect continue, a turn whose client left keeps its request and turn spans open until it ends', async (t) => {
  const front = tracing();
  const started = deferred();
  const release = deferred();
  const model = {
    name: 'held',
    async *stream() {
      yield 'first ';
      started.resolve();
      await release.promise;
      yield 'second';
    },
  };
  const agent = new Agent('held', { model, storage: new MemoryStorage() });
  const router = await listen(new AgentRouter(agent, { logger: quiet, tracer: front.tracer, onDisconnect: 'continue' }).toRequestListener());
  t.after(router.close);
  const leave = new AbortController();
  const asked = fetch(`${router.url}/chat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ message: 'hi' }), signal: leave.signal });
  await started.promise;
  leave.abort();
  await assert.rejects(asked);
  // The turn goes on without its client: its spans stay open (the request's answer is the turn's end).
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.deepEqual(front.spans().map((span) => span.name), []);
  release.resolve();
  await until(() => front.spans().length >= 3);
  const request = byName(front.spans(), 'POST /chat');
  const turn = byName(front.spans(), 'agent_router.turn chat');
  assert.equal(turn.status.code, SpanStatusCode.UNSET);
  assert.equal(parentOf(turn), request.spanContext().spanId);
  assert.equal(parentOf(byName(front.spans(), 'chat held')), turn.spanContext().spanId);
  assert.deepEqual(agent.messages.map((message) => message.content), ['hi', 'first second']);
});

test('trace: a remote stream that fails after its 200 marks the transport span ERROR', async (t) => {
  const front = tracing();
  const remote = new AgentRegistry();
  const model = {
    name: 'breaks',
    async *stream() {
      yield 'partial ';
      throw new AgentRouterError(503, 'model_unavailable', 'the model went away', { expose: true });
    },
  };
  remote.register('bot-.*', class extends Agent {
    constructor(id: string) {
      super(id, { model, storage: new MemoryStorage() });
    }
  });
  const server = await new AgentServer(remote, { logger: quiet }).serve(0);
  t.after(() => server.close());
  const registry = new AgentRegistry();
  registry.register('bot-.*', new HTTPTransport(`${server.url}/agent`));
  const router = await listen(new AgentRouter(registry, { logger: quiet, tracer: front.tracer }).toRequestListener());
  t.after(router.close);
  const res = await streamChat(`${router.url}/bot-1/chat`, 'hi');
  assert.equal(res.status, 200);
  const body = await res.text();
  assert.match(body, /data: partial/);
  assert.match(body, /event: error/);
  await until(() => front.spans().some((span) => span.kind === SpanKind.CLIENT));
  const call = front.spans().find((span) => span.kind === SpanKind.CLIENT) as ReadableSpan;
  assert.equal(call.attributes['http.response.status_code'], 200);
  assert.equal(call.status.code, SpanStatusCode.ERROR);
  assert.equal(call.attributes['error.type'], 'model_unavailable');
});

test('trace: traceparent parsing follows W3C Trace Context', () => {
  const ok = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
  assert.deepEqual(parseTraceparent(ok), { traceId: '4bf92f3577b34da6a3ce929d0e0e4736', spanId: '00f067aa0ba902b7', traceFlags: 1, isRemote: true });
  assert.equal(parseTraceparent(`${ok}-extra`), undefined, 'version 00 has exactly four fields');
  assert.ok(parseTraceparent(`01-${ok.slice(3)}-extra`), 'a later version may add fields');
  assert.equal(parseTraceparent(`ff-${ok.slice(3)}`), undefined);
  assert.equal(parseTraceparent('00-00000000000000000000000000000000-00f067aa0ba902b7-01'), undefined);
  assert.equal(parseTraceparent('00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01'), undefined);
  assert.equal(parseTraceparent(ok.toUpperCase()), undefined);
  assert.equal(parseTraceparent(`${ok}, ${ok}`), undefined);
  assert.equal(parseTraceparent(undefined), undefined);
});
