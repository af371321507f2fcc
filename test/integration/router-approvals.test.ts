import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { scriptedModel, type ScriptedFunction } from '../../src/models/scripted.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { AgentServer } from '../../src/server/server.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import type { Storage } from '../../src/storage/storage.ts';
import { HTTPTransport } from '../../src/transports/http.ts';
import { getJson, postJson } from '../helpers/http.ts';
import { listen } from '../helpers/listen.ts';
import { collectSSE } from '../helpers/sse.ts';
import { fileBackend, postgresBackend, redisBackend, type StorageBackend } from '../helpers/storage-backends.ts';

const TRANSFER = {
  description: 'Moves money',
  parameters: { type: 'object', properties: { amount: { type: 'number' } }, required: ['amount'] },
  approval: (args: { amount: number }) => args.amount > 100,
};
const ADD = { description: 'Adds', parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] } };

/** Step 1 calls a small add (no approval) and a large transfer (approval); step 2 says what the tools answered. */
const banker: ScriptedFunction = (request) => {
  const last = request.messages.at(-1);
  if (last?.role === 'tool') {
    const answers = request.messages.filter((m) => m.role === 'tool').map((m) => m.content);
    return `Done: ${answers.join(' | ')}`;
  }
  return { text: 'Working. ', toolCalls: [{ id: 'add1', name: 'add', arguments: { a: 1, b: 2 } }, { id: 'tx1', name: 'transfer', arguments: { amount: 500 } }] };
};

interface Served {
  url: string;
  moved: number[];
  auth: Array<{ agentId: string; action: string }>;
  close(): Promise<void>;
}

async function serve(t: TestContext | undefined, storage: Storage = new MemoryStorage()): Promise<Served> {
  const moved: number[] = [];
  const auth: Array<{ agentId: string; action: string }> = [];
  class Bank extends Agent {
    static override tools = { transfer: TRANSFER, add: ADD };
    constructor(id: string) {
      super(id, { model: scriptedModel(banker), storage });
    }
    transfer({ amount }: { amount: number }) {
      moved.push(amount);
      return { moved: amount };
    }
    add({ a, b }: { a: number; b: number }) {
      return a + b;
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Bank);
  const router = new AgentRouter(registry, { pingInterval: 0, authorize: (_req, ctx) => (auth.push(ctx), true) });
  const { url, close } = await listen(router.toRequestListener());
  t?.after(close);
  return { url, moved, auth, close };
}

const typedEvents = async (res: Response) => (await collectSSE(res)).events.map((e) => ({ event: e.event, data: e.data === '[DONE]' ? e.data : JSON.parse(e.data) }));
const PENDING = [{ id: 'tx1', name: 'transfer', arguments: { amount: 500 } }];
const postStream = (url: string, body: unknown, query: string) => fetch(`${url}${query}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

test('approval granted (JSON): the turn pauses with pending_approvals, GET lists them, POST runs the call and the model goes on', async (t) => {
  const { url, moved, auth } = await serve(t);
  const paused = await postJson(`${url}/a1/chat`, { message: 'pay' });
  assert.equal(paused.status, 200);
  assert.equal(typeof paused.body.turn_id, 'string');
  assert.equal(paused.body.response, 'Working. ');
  assert.deepEqual(paused.body.pending_approvals, PENDING);
  assert.deepEqual(paused.body.tool_calls, [{ id: 'add1', name: 'add', arguments: { a: 1, b: 2 }, result: 3 }]);
  assert.deepEqual(moved, []);
  const listed = await getJson(`${url}/a1/approvals`);
  assert.deepEqual(listed.body, { agent_id: 'a1', pending_approvals: PENDING });
  const resumed = await postJson(`${url}/a1/approvals`, { decisions: [{ id: 'tx1', approved: true }] });
  assert.equal(resumed.status, 200);
  assert.equal(typeof resumed.body.turn_id, 'string');
  assert.notEqual(resumed.body.turn_id, paused.body.turn_id, 'a new turn');
  assert.equal(resumed.body.response, 'Done: 3 | {"moved":500}');
  assert.deepEqual(resumed.body.tool_calls, [{ id: 'tx1', name: 'transfer', arguments: { amount: 500 }, result: { moved: 500 } }]);
  assert.equal(resumed.body.pending_approvals, undefined);
  assert.deepEqual(moved, [500]);
  assert.deepEqual((await getJson(`${url}/a1/approvals`)).body, { agent_id: 'a1', pending_approvals: [] });
  assert.deepEqual(auth.map((a) => a.action), ['chat', 'read', 'approve', 'read']);
});

test('approval refused (typed stream): tool.approval_required then turn.paused; the refusal goes to the model with the reason', async (t) => {
  const { url, moved } = await serve(t);
  const paused = await typedEvents(await postStream(`${url}/r1/chat`, { message: 'pay' }, '?stream=events'));
  assert.deepEqual(paused.map((e) => e.event), ['turn.started', 'text.delta', 'tool.call', 'tool.call', 'tool.result', 'tool.approval_required', 'turn.paused']);
  assert.deepEqual(paused[5]?.data, { type: 'tool.approval_required', ...PENDING[0] });
  assert.deepEqual(paused[6]?.data, { type: 'turn.paused', pending_approvals: PENDING });
  const resumed = await typedEvents(await postStream(`${url}/r1/approvals`, { decisions: [{ id: 'tx1', approved: false, reason: 'too much' }] }, '?stream=events'));
  assert.deepEqual(resumed.map((e) => e.event), ['turn.started', 'tool.result', 'text.delta', 'turn.finished']);
  const refusal = 'A person refused the call of transfer; it did not run: too much';
  assert.deepEqual(resumed[1]?.data, { type: 'tool.result', id: 'tx1', name: 'transfer', error: { message: refusal, code: 'tool_refused' } });
  assert.equal(resumed[3]?.data.result.text, `Done: 3 | ${refusal}`);
  assert.deepEqual(moved, []);
});

test('the plain stream of a paused turn ends with event: done; a plain-stream approval answers as chat does', async (t) => {
  const { url } = await serve(t);
  const paused = await collectSSE(await postStream(`${url}/p1/chat`, { message: 'pay' }, '?stream=true'));
  assert.equal(paused.text, 'Working. ');
  assert.equal(paused.events.at(-1)?.event, 'done');
  const resumed = await collectSSE(await postStream(`${url}/p1/approvals`, { decisions: [{ id: 'tx1', approved: true }] }, '?stream=true'));
  assert.equal(resumed.text, 'Done: 3 | {"moved":500}');
  assert.equal(resumed.events.at(-1)?.event, 'done');
});

test('409 approval_pending, 404 unknown_tool_call, 409 no_pending_approval, 400 for a bad body, 405 for another method', async (t) => {
  const { url } = await serve(t);
  const none = await postJson(`${url}/e1/approvals`, { decisions: [{ id: 'tx1', approved: true }] });
  assert.equal(none.status, 409);
  assert.equal(none.body.code, 'no_pending_approval');
  await postJson(`${url}/e1/chat`, { message: 'pay' });
  const chat = await postJson(`${url}/e1/chat`, { message: 'again' });
  assert.equal(chat.status, 409);
  assert.equal(chat.body.code, 'approval_pending');
  assert.deepEqual(chat.body.pending_approvals, PENDING);
  const unknown = await postJson(`${url}/e1/approvals`, { decisions: [{ id: 'nope', approved: true }] });
  assert.equal(unknown.status, 404);
  assert.equal(unknown.body.code, 'unknown_tool_call');
  for (const body of [{}, { decisions: [] }, { decisions: [{ id: 'tx1' }] }, { decisions: [{ id: 'tx1', approved: 'yes' }] }, { decisions: 'tx1' }, []]) {
    const bad = await postJson(`${url}/e1/approvals`, body);
    assert.equal(bad.status, 400, JSON.stringify(body));
  }
  const wrong = await fetch(`${url}/e1/approvals`, { method: 'PUT' });
  assert.equal(wrong.status, 405);
  assert.equal(wrong.headers.get('allow'), 'GET, HEAD, POST');
  assert.deepEqual((await getJson(`${url}/e1/approvals`)).body.pending_approvals, PENDING, 'nothing changed');
});

async function restart(t: TestContext, backend: StorageBackend): Promise<void> {
  t.after(() => backend.cleanup());
  const first = await serve(undefined, await backend.open());
  const paused = await postJson(`${first.url}/s1/chat`, { message: 'pay' });
  assert.deepEqual(paused.body.pending_approvals, PENDING);
  await first.close();
  // A new process: a new router, agent instance and storage over the same place.
  const second = await serve(t, await backend.open());
  assert.deepEqual((await getJson(`${second.url}/s1/approvals`)).body.pending_approvals, PENDING);
  assert.equal((await postJson(`${second.url}/s1/chat`, { message: 'x' })).body.code, 'approval_pending');
  const resumed = await postJson(`${second.url}/s1/approvals`, { decisions: [{ id: 'tx1', approved: true }] });
  assert.equal(resumed.status, 200);
  assert.equal(resumed.body.response, 'Done: 3 | {"moved":500}');
  assert.deepEqual(second.moved, [500]);
  const record = await (await backend.open()).load('s1');
  assert.deepEqual(record?.messages.map((m) => m.role), ['user', 'assistant', 'tool', 'tool', 'assistant']);
}

test('a restart between pause and approval: FileStorage', (t) => restart(t, fileBackend()));
test('a restart between pause and approval: Postgres', (t) => restart(t, postgresBackend()));

test('a streamed approval turn is rejoined through another process sharing the storage (Redis, shareTurns)', async (t) => {
  const backend = redisBackend('node-redis', { shareTurns: true });
  const [one, two] = [await backend.open(), await backend.open()];
  t.after(async () => {
    await one.close?.();
    await two.close?.();
    await backend.cleanup();
  });
  // Two routers on two storages over one Redis: as two processes would be.
  const [first, second] = [await serve(t, one), await serve(t, two)];
  const paused = await postJson(`${first.url}/r1/chat`, { message: 'pay' });
  assert.deepEqual(paused.body.pending_approvals, PENDING);
  const approved = await postStream(`${first.url}/r1/approvals`, { decisions: [{ id: 'tx1', approved: true }] }, '?stream=events');
  const turnId = approved.headers.get('turn-id') as string;
  const live = await collectSSE(approved);
  assert.equal(live.events.at(-1)?.event, 'turn.finished');
  const rejoined = await fetch(`${second.url}/r1/turns/${turnId}/events?stream=events`);
  assert.equal(rejoined.status, 200);
  const replay = await collectSSE(rejoined);
  assert.deepEqual(replay.events.map((e) => [e.event, e.id, e.data]), live.events.map((e) => [e.event, e.id, e.data]));
});

test('the remote pair: a front router relays a back AgentServer pause, its approvals list and decisions (JSON and typed stream), and its 409/404', async (t) => {
  const moved: number[] = [];
  const storage = new MemoryStorage();
  class Bank extends Agent {
    static override tools = { transfer: TRANSFER, add: ADD };
    constructor(id: string) {
      super(id, { model: scriptedModel(banker), storage });
    }
    transfer({ amount }: { amount: number }) {
      moved.push(amount);
      return { moved: amount };
    }
    add({ a, b }: { a: number; b: number }) {
      return a + b;
    }
  }
  const backRegistry = new AgentRegistry();
  backRegistry.register('.*', Bank);
  const back = new AgentServer(backRegistry, { logger: { error: () => {} }, pingInterval: 0 });
  await back.serve(0);
  t.after(() => back.close());
  const front = new AgentRegistry();
  front.register('.*', new HTTPTransport(`${back.url}/agent`));
  const { url, close } = await listen(new AgentRouter(front, { logger: { error: () => {} }, pingInterval: 0 }).toRequestListener());
  t.after(close);

  const paused = await postJson(`${url}/x1/chat`, { message: 'pay' });
  assert.equal(paused.status, 200);
  assert.deepEqual(paused.body.pending_approvals, PENDING);
  assert.deepEqual((await getJson(`${url}/x1/approvals`)).body, { agent_id: 'x1', pending_approvals: PENDING });
  assert.deepEqual((await getJson(`${back.url}/agent/x1/approvals`)).body, { agent_id: 'x1', pending_approvals: PENDING }, 'AgentServer serves it under /agent');
  assert.equal((await postJson(`${url}/x1/chat`, { message: 'again' })).status, 409);
  assert.equal((await postJson(`${url}/x1/approvals`, { decisions: [{ id: 'zz', approved: true }] })).status, 404);
  const resumed = await postJson(`${url}/x1/approvals`, { decisions: [{ id: 'tx1', approved: true }] });
  assert.equal(resumed.status, 200);
  assert.equal(resumed.body.response, 'Done: 3 | {"moved":500}');
  assert.equal(typeof resumed.body.turn_id, 'string');
  assert.deepEqual(moved, [500]);
  assert.equal((await postJson(`${url}/x1/approvals`, { decisions: [{ id: 'tx1', approved: true }] })).body.code, 'no_pending_approval');

  const typed = await typedEvents(await postStream(`${url}/x2/chat`, { message: 'pay' }, '?stream=events'));
  assert.deepEqual(typed.map((e) => e.event), ['turn.started', 'text.delta', 'tool.call', 'tool.call', 'tool.result', 'tool.approval_required', 'turn.paused']);
  assert.deepEqual(typed.at(-1)?.data, { type: 'turn.paused', pending_approvals: PENDING });
  const refused = await typedEvents(await postStream(`${url}/x2/approvals`, { decisions: [{ id: 'tx1', approved: false }] }, '?stream=events'));
  assert.deepEqual(refused.map((e) => e.event), ['turn.started', 'tool.result', 'text.delta', 'turn.finished']);
  assert.deepEqual(moved, [500]);
});

test('the AI SDK UI stream: a paused turn finishes with finishReason tool-calls, and POST approvals?stream=ui streams the rest', async (t) => {
  const { url, moved } = await serve(t);
  const parts = async (res: Response): Promise<Array<Record<string, unknown>>> => {
    assert.equal(res.headers.get('x-vercel-ai-ui-message-stream'), 'v1');
    const { events } = await collectSSE(res);
    assert.equal(events.at(-1)?.data, '[DONE]');
    return events.slice(0, -1).map((event) => JSON.parse(event.data) as Record<string, unknown>);
  };
  const paused = await parts(await fetch(`${url}/ui-bank/chat?stream=ui`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ message: 'pay' }) }));
  assert.ok(paused.some((part) => part['type'] === 'tool-input-available' && part['toolCallId'] === 'tx1'));
  assert.ok(!paused.some((part) => part['type'] === 'tool-output-available' && part['toolCallId'] === 'tx1'), 'the transfer waits');
  assert.deepEqual(paused.at(-1), { type: 'finish', finishReason: 'tool-calls' });
  assert.deepEqual(moved, []);

  const body = JSON.stringify({ decisions: [{ id: 'tx1', approved: true }] });
  const resumed = await parts(await fetch(`${url}/ui-bank/approvals?stream=ui`, { method: 'POST', headers: { 'content-type': 'application/json' }, body }));
  assert.ok(resumed.some((part) => part['type'] === 'tool-output-available' && part['toolCallId'] === 'tx1'));
  assert.ok(resumed.some((part) => part['type'] === 'text-delta'));
  assert.deepEqual(resumed.at(-1), { type: 'finish', finishReason: 'stop' });
  assert.deepEqual(moved, [500]);
});

test('behind a transport of your own, approvals answer 501 not_implemented saying so, and the log stays quiet', async (t) => {
  const transport = {
    chat: async () => 'ok',
    stream: () => assert.fail('no stream here'),
    invoke: async () => null,
    state: async () => ({}),
  };
  const registry = new AgentRegistry();
  registry.register('.*', transport);
  const logged: unknown[] = [];
  const { url, close } = await listen(new AgentRouter(registry, { logger: { error: (_message, error) => logged.push(error) } }).toRequestListener());
  t.after(close);
  const refusal = {
    error: 'Agent "r1" is served by a transport of your own, which has no approvals route (HTTPTransport relays them)',
    code: 'not_implemented',
  };
  for (const reply of [await getJson(`${url}/r1/approvals`), await postJson(`${url}/r1/approvals`, { decisions: [{ id: 'c1', approved: true }] })]) {
    assert.equal(reply.status, 501);
    assert.deepEqual(reply.body, refusal);
  }
  assert.deepEqual(logged, [], 'the setup, not a server failure');
});
