import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { echoModel } from '../../src/models/echo.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentRouter, type AgentRouterOptions } from '../../src/router/router.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { HTTPTransport } from '../../src/transports/http.ts';
import { counterOn } from '../helpers/agents.ts';
import { postJson, streamChat } from '../helpers/http.ts';
import { listen } from '../helpers/listen.ts';
import { collectSSE } from '../helpers/sse.ts';

const TURN_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** A registry router: `remote-*` goes to `remote` when given, every other id is a local counter (echo) agent. */
async function serve(t: TestContext, options: AgentRouterOptions = {}, remote?: string) {
  const registry = new AgentRegistry();
  if (remote !== undefined) registry.register('remote-.*', new HTTPTransport(remote));
  registry.register('.*', counterOn(new MemoryStorage()));
  const router = new AgentRouter(registry, { logger: { error: () => {} }, ...options });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  return { url, router };
}

test('turn ids: Turn-Id header and turn_id in JSON chat and invoke replies, a new one per turn', async (t) => {
  const { url } = await serve(t);
  const chat = await postJson(`${url}/a/chat`, { message: 'hi' });
  assert.equal(chat.status, 200);
  assert.match(chat.body.turn_id, TURN_ID);
  assert.equal(chat.headers.get('turn-id'), chat.body.turn_id);
  assert.deepEqual(Object.keys(chat.body), ['agent_id', 'turn_id', 'response']);
  const invoke = await postJson(`${url}/a/invoke`, { method: 'increment' });
  assert.equal(invoke.headers.get('turn-id'), invoke.body.turn_id);
  assert.deepEqual(invoke.body, { agent_id: 'a', turn_id: invoke.body.turn_id, result: 1 });
  assert.notEqual(invoke.body.turn_id, chat.body.turn_id);
  const envelope = await postJson(`${url}/a`, { action: 'invoke', method: 'increment' });
  assert.equal(envelope.headers.get('turn-id'), envelope.body.turn_id);
  const state = await fetch(`${url}/a/state`);
  assert.equal(state.headers.get('turn-id'), null, 'a state read is no turn');
});

test('turn ids: the Turn-Id header of a stream, and turn_id in turn.started', async (t) => {
  const { url } = await serve(t);
  const plain = await streamChat(`${url}/a/chat`, 'one two');
  assert.match(plain.headers.get('turn-id') ?? '', TURN_ID);
  await plain.text();
  const typed = await streamChat(`${url}/a/chat`, 'one two', { query: '?stream=events' });
  const id = typed.headers.get('turn-id');
  const { events } = await collectSSE(typed);
  assert.deepEqual(JSON.parse((events[0] as { data: string }).data), { type: 'turn.started', agent_id: 'a', turn_id: id });
});

test('turn ids: a remote turn keeps its own id through HTTPTransport', async (t) => {
  const b = await serve(t);
  const a = await serve(t, {}, b.url);
  const chat = await postJson(`${a.url}/remote-x/chat`, { message: 'hi' });
  assert.match(chat.body.turn_id, TURN_ID);
  assert.equal(chat.headers.get('turn-id'), chat.body.turn_id);
  const typed = await streamChat(`${a.url}/remote-x/chat`, 'over', { query: '?stream=events' });
  const id = typed.headers.get('turn-id');
  assert.match(id ?? '', TURN_ID);
  const { events } = await collectSSE(typed);
  assert.equal(JSON.parse((events[0] as { data: string }).data).turn_id, id);
});

test('turn ids: a Turn the agent makes for chat() or invoke() in code has an id of its own', async () => {
  const agent = new Agent('code-turn', { model: echoModel(), storage: new MemoryStorage() });
  assert.equal(await agent.chat('still works'), 'still works');
});

test('event ids: every event of a turn carries <turn_id>:<seq>, seq from 1, in both stream modes', async (t) => {
  const { url } = await serve(t);
  const plain = await streamChat(`${url}/a/chat`, 'one two three');
  const id = plain.headers.get('turn-id');
  const { events, text } = await collectSSE(plain);
  assert.equal(text, 'one two three', 'a client reading data lines sees the reply as before');
  assert.deepEqual(events.map((e) => [e.event, e.id]), [
    ['message', `${id}:1`],
    ['message', `${id}:2`],
    ['message', `${id}:3`],
    ['done', `${id}:4`],
  ]);
  const typed = await streamChat(`${url}/a/chat`, 'one two', { query: '?stream=events' });
  const typedId = typed.headers.get('turn-id');
  const got = await collectSSE(typed);
  assert.deepEqual(got.events.map((e) => [e.event, e.id]), [
    ['turn.started', `${typedId}:1`],
    ['text.delta', `${typedId}:2`],
    ['text.delta', `${typedId}:3`],
    ['turn.finished', `${typedId}:4`],
  ]);
});
