import assert from 'node:assert/strict';
import test from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { window } from '../../src/agent/model-step.ts';
import type { ToolContext } from '../../src/agent/tools.ts';
import { AgentRouterError } from '../../src/errors.ts';
import type { ModelRequest } from '../../src/models/model.ts';
import { scriptedModel } from '../../src/models/scripted.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import type { ChatMessage } from '../../src/types.ts';

const ADD = { description: 'Adds two numbers', parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'], additionalProperties: false } };

class Calc extends Agent {
  static override tools = { add: ADD };
  seen: ToolContext[] = [];
  async add({ a, b }: { a: number; b: number }, ctx: ToolContext) {
    this.seen.push(ctx);
    return a + b;
  }
}

test('tools and maxSteps are checked when the agent is made, naming the tool', () => {
  class NoMethod extends Agent {
    static override tools = { add: ADD };
  }
  assert.throws(() => new NoMethod('x', { storage: new MemoryStorage() }), /NoMethod\.tools\.add: NoMethod has no method add/);
  assert.throws(() => new Agent('x', { storage: new MemoryStorage(), tools: { 'bad name': { ...ADD, run: () => 1 } } }), /"bad name".*1 to 64 letters/);
  assert.throws(() => new Agent('x', { storage: new MemoryStorage(), tools: { add: { ...ADD, parameters: { type: 'object', wibble: 1 }, run: () => 1 } } }), /add/);
  assert.throws(() => new Agent('x', { storage: new MemoryStorage(), maxSteps: 0 }), /maxSteps must be a whole number >= 1/);
  assert.equal(new Agent('x', { storage: new MemoryStorage() }).maxSteps, 8);
  class ToolAsAction extends Agent {
    static override actions = ['tools'];
  }
  assert.throws(() => new ToolAsAction('x', { storage: new MemoryStorage() }), /"tools", a built-in member/);
});

test('a two-step tool turn runs the tool with its context, asks again, and commits every message once', async () => {
  const requests: ModelRequest[] = [];
  const script = [{ text: 'Adding. ', toolCalls: [{ name: 'add', arguments: { a: 2, b: 3 } }] }, 'It is 5.'];
  let i = 0;
  const agent = new Calc('calc', {
    storage: new MemoryStorage(),
    model: scriptedModel((request) => {
      requests.push(request);
      return script[i++] as never;
    }),
  });
  assert.equal(await agent.chat('2+3?'), 'Adding. It is 5.');
  assert.notEqual(agent.version, 0, 'committed');
  assert.equal(agent.seen.length, 1);
  assert.equal(agent.seen[0]?.agentId, 'calc');
  assert.equal(typeof agent.seen[0]?.turnId, 'string');
  assert.ok(agent.seen[0]?.signal instanceof AbortSignal);
  assert.deepEqual(requests[0]?.tools?.map((t) => t.name), ['add']);
  assert.deepEqual(
    agent.messages.map((m) => ({ ...m })),
    [
      { role: 'user', content: '2+3?' },
      { role: 'assistant', content: 'Adding. ', toolCalls: [{ id: 'call_0_0', name: 'add', arguments: '{"a":2,"b":3}' }] },
      { role: 'tool', toolCallId: 'call_0_0', name: 'add', content: '5' },
      { role: 'assistant', content: 'It is 5.' },
    ],
  );
  assert.equal(requests[1]?.messages.length, 3, 'the second step sees the call and its result');
});

test('parallel calls run at once; bad arguments and a throwing tool go back to the model as errors', async () => {
  let running = 0;
  let peak = 0;
  const slow = { description: 'Waits', parameters: { type: 'object' }, run: async () => { running++; peak = Math.max(peak, running); await new Promise((r) => setTimeout(r, 20)); running--; return 'ok'; } };
  const boom = { description: 'Throws', parameters: { type: 'object' }, run: () => { throw new Error('secret detail'); } };
  const script = [
    { toolCalls: [{ name: 'slow' }, { name: 'slow' }, { name: 'boom' }, { name: 'add', arguments: '{"a": 1' }] },
    { toolCalls: [{ name: 'add', arguments: { a: 1, b: 1 } }] },
    'done',
  ];
  const seen: ModelRequest[] = [];
  const agent = new Calc('p', { storage: new MemoryStorage(), tools: { slow, boom }, model: scriptedModel((r) => (seen.push(r), script[seen.length - 1] as never)) });
  assert.equal(await agent.chat('go'), 'done');
  assert.equal(peak, 2);
  const tools = agent.messages.filter((m) => m.role === 'tool');
  assert.deepEqual(tools.map((m) => (m.role === 'tool' ? [m.name, m.isError === true] : [])), [['slow', false], ['slow', false], ['boom', true], ['add', true], ['add', false]]);
  const text = JSON.stringify(agent.messages);
  assert.ok(!text.includes('secret detail'), 'a plain error is not shown to the model');
  assert.ok(text.includes('not valid JSON'));
});

test('maxSteps stops a model that keeps calling tools, and the turn stores nothing', async () => {
  const agent = new Calc('m', { storage: new MemoryStorage(), maxSteps: 3, model: scriptedModel(() => ({ toolCalls: [{ name: 'add', arguments: { a: 1, b: 1 } }] })) });
  await assert.rejects(agent.chat('loop'), (error: unknown) => error instanceof AgentRouterError && error.code === 'max_steps_exceeded' && error.status === 500 && error.expose);
  assert.equal(agent.seen.length, 2, 'two steps ran tools; the third would need a fourth');
  assert.equal(agent.version, 0);
  assert.deepEqual(agent.messages, []);
});

test('a cut while a tool runs aborts its signal and stores nothing', async () => {
  let aborted = false;
  let started!: () => void;
  const running = new Promise<void>((r) => (started = r));
  const wait = {
    description: 'Waits for the signal',
    parameters: { type: 'object' },
    run: (_: unknown, { signal }: ToolContext) => new Promise((_r, reject) => { started(); signal.addEventListener('abort', () => { aborted = true; reject(signal.reason); }); }),
  };
  const agent = new Agent('c', { storage: new MemoryStorage(), tools: { wait }, model: scriptedModel([{ toolCalls: [{ name: 'wait' }] }, 'never']) });
  const controller = new AbortController();
  const chat = agent.chat('go', { signal: controller.signal });
  await running;
  controller.abort(new Error('gone'));
  await assert.rejects(chat);
  assert.equal(aborted, true);
  assert.equal(agent.version, 0);
});

test('the lastMessages window starts at a user message, never between a call and its result', () => {
  const history: ChatMessage[] = [
    { role: 'user', content: 'a' },
    { role: 'assistant', content: '', toolCalls: [{ id: '1', name: 'add', arguments: '{}' }] },
    { role: 'tool', toolCallId: '1', name: 'add', content: '2' },
    { role: 'assistant', content: 'two' },
    { role: 'user', content: 'b' },
    { role: 'assistant', content: 'ok' },
  ];
  const user: ChatMessage = { role: 'user', content: 'c' };
  for (let last = 1; last <= 8; last++) {
    const got = window(history, last, user);
    assert.equal(got[0]?.role, 'user', `last=${last}`);
    for (const [i, m] of got.entries()) if (m.role === 'tool') assert.equal(got[i - 1]?.role === 'assistant' || got[i - 1]?.role === 'tool', true);
  }
  assert.equal(window(history, 5, user).length, 3, 'from "b"');
});

test('a call that needs approval pauses the turn: committed up to the step, chat refused with 409, approve() resumes', async () => {
  let ran = 0;
  const guarded = { description: 'Guarded', parameters: { type: 'object' }, approval: true, run: () => ++ran };
  const model = scriptedModel((request) => {
    const last = request.messages.at(-1);
    if (last?.role === 'tool') return `done: ${last.content}`;
    return { text: 'Asking. ', toolCalls: [{ id: 'g1', name: 'guarded' }, { id: 'a1', name: 'add', arguments: { a: 1, b: 2 } }] };
  });
  const agent = new Agent('g', { storage: new MemoryStorage(), tools: { guarded, add: { ...ADD, run: ({ a, b }: { a: number; b: number }) => a + b } }, model });
  assert.equal(await agent.chat('go'), 'Asking. ');
  assert.equal(ran, 0);
  assert.deepEqual(agent.messages.map((m) => m.role), ['user', 'assistant', 'tool'], 'the call that needed no approval ran and is committed');
  assert.deepEqual(agent.pendingApprovals.map((c) => c.id), ['g1']);
  await assert.rejects(agent.chat('again'), (error: AgentRouterError) => error.code === 'approval_pending' && error.status === 409);
  await assert.rejects(agent.approve([{ id: 'zz', approved: true }]), (error: AgentRouterError) => error.code === 'unknown_tool_call' && error.status === 404);
  await assert.rejects(agent.approve([]), (error: AgentRouterError) => error.code === 'invalid_decisions');
  assert.equal(await agent.approve([{ id: 'g1', approved: true }]), 'done: 1');
  assert.equal(ran, 1);
  assert.deepEqual(agent.pendingApprovals, []);
  assert.deepEqual(agent.messages.map((m) => m.role), ['user', 'assistant', 'tool', 'tool', 'assistant']);
  await assert.rejects(agent.approve([{ id: 'g1', approved: true }]), (error: AgentRouterError) => error.code === 'no_pending_approval' && error.status === 409);
  assert.equal(await agent.chat('more'), 'Asking. ', 'the conversation goes on');
  assert.equal(await agent.approve([{ id: 'g1', approved: false, reason: 'not today' }]), 'done: A person refused the call of guarded; it did not run: not today');
  assert.equal(ran, 1, 'a refused call never runs');
  const refused = agent.messages.at(-2);
  assert.equal(refused?.role === 'tool' && refused.isError, true);
});

test('window() for a resumed turn starts at the user message that opened the paused turn', () => {
  const history: ChatMessage[] = [
    { role: 'user', content: 'a' },
    { role: 'assistant', content: '', toolCalls: [{ id: 'x', name: 'f', arguments: '{}' }] },
    { role: 'tool', toolCallId: 'x', name: 'f', content: '1' },
    { role: 'assistant', content: '', toolCalls: [{ id: 'y', name: 'f', arguments: '{}' }] },
  ];
  for (let last = 1; last <= 5; last++) assert.equal(window(history, last, undefined)[0]?.role, 'user', `last=${last}`);
});
