import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseJsonEventStream, readUIMessageStream, uiMessageChunkSchema, type UIMessage, type UIMessageChunk } from 'ai';
import * as ai6 from 'ai6';
import { Agent } from '../../src/agent/agent.ts';
import { demoRegistry } from '../../src/cli/demo.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { scriptedModel, type ScriptedFunction } from '../../src/models/scripted.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { AgentRouterError } from '../../src/errors.ts';
import { listen } from '../helpers/listen.ts';
import { postJson } from '../helpers/http.ts';
import { NodeChat } from '../helpers/ai-chat.ts';
import { serveWords, Steps } from '../helpers/turns-serve.ts';

async function serveDemo(t: { after: (fn: () => Promise<void>) => void }, options = {}) {
  const router = new AgentRouter(demoRegistry({ storage: new MemoryStorage() }), { logger: { error: () => {} }, ...options });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  return url;
}

async function serveModel(t: { after: (fn: () => Promise<void>) => void }, model: ScriptedFunction) {
  class Bot extends Agent {
    constructor(id: string) {
      super(id, { model: scriptedModel(model) });
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Bot);
  const router = new AgentRouter(registry, { logger: { error: () => {} } });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  return url;
}

function postUI(url: string, body: unknown): Promise<Response> {
  return fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
}

/** The AI SDK's own parser and schema: every part must validate, as a client's would. */
async function readChunks(res: Response): Promise<UIMessageChunk[]> {
  const chunks: UIMessageChunk[] = [];
  const stream = parseJsonEventStream({ stream: res.body as ReadableStream<Uint8Array>, schema: uiMessageChunkSchema });
  for await (const parsed of stream as unknown as AsyncIterable<{ success: boolean; value?: UIMessageChunk; error?: unknown }>) {
    assert.ok(parsed.success, `a part the ai package refuses: ${String(parsed.error)}`);
    chunks.push(parsed.value as UIMessageChunk);
  }
  return chunks;
}

test('?stream=ui answers the UI message stream v1: header, parts the ai schema accepts, data: [DONE]', async (t) => {
  const url = await serveDemo(t);
  const res = await postUI(`${url}/echo-1/chat?stream=ui`, { message: 'hi there world' });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('x-vercel-ai-ui-message-stream'), 'v1');
  assert.equal(res.headers.get('content-type'), 'text/event-stream');
  const raw = await res.text();
  assert.ok(raw.endsWith('data: [DONE]\n\n'), raw);
  const again = await postUI(`${url}/echo-1/chat?stream=ui`, { message: 'again' });
  const chunks = await readChunks(again);
  assert.deepEqual(chunks.map((c) => c.type), ['start', 'start-step', 'text-start', 'text-delta', 'text-end', 'finish-step', 'finish']);
  const turnId = again.headers.get('turn-id');
  assert.equal((chunks[0] as { messageId?: string }).messageId, turnId);
});

test('readUIMessageStream builds the assistant message: text in pieces, tool parts for the calls', async (t) => {
  const url = await serveDemo(t);
  const res = await postUI(`${url}/calc-1/chat?stream=ui`, { message: 'What is 6*7?' });
  const parts = parseJsonEventStream({ stream: res.body as ReadableStream<Uint8Array>, schema: uiMessageChunkSchema });
  const chunks = parts.pipeThrough(new TransformStream<{ success: boolean; value?: UIMessageChunk }, UIMessageChunk>({
    transform(parsed, controller) {
      if (parsed.success) controller.enqueue(parsed.value as UIMessageChunk);
    },
  }));
  let last: UIMessage | undefined;
  for await (const message of readUIMessageStream({ stream: chunks })) last = message;
  assert.ok(last !== undefined);
  const tool = last.parts.find((p) => p.type === 'dynamic-tool') as { toolName: string; state: string; input: unknown; output: unknown } | undefined;
  assert.ok(tool, JSON.stringify(last.parts));
  assert.equal(tool.toolName, 'calculate');
  assert.deepEqual(tool.input, { a: 6, op: '*', b: 7 });
  assert.equal(tool.state, 'output-available');
  assert.equal(tool.output, 42);
  const text = last.parts.filter((p) => p.type === 'text').map((p) => (p as { text: string }).text).join('');
  assert.equal(text, 'Let me calculate that. The answer is 42.');
});

test("the ai package's previous major (6) reads the same stream: every part valid, the same assistant message", async (t) => {
  const url = await serveDemo(t);
  const res = await postUI(`${url}/calc-1/chat?stream=ui`, { message: 'What is 6*7?' });
  const parsed = ai6.parseJsonEventStream({ stream: res.body as ReadableStream<Uint8Array>, schema: ai6.uiMessageChunkSchema });
  const chunks = parsed.pipeThrough(new TransformStream<{ success: boolean; value?: ai6.UIMessageChunk; error?: unknown }, ai6.UIMessageChunk>({
    transform(part, controller) {
      assert.ok(part.success, `a part ai 6 refuses: ${String(part.error)}`);
      controller.enqueue(part.value as ai6.UIMessageChunk);
    },
  }));
  let last: ai6.UIMessage | undefined;
  for await (const message of ai6.readUIMessageStream({ stream: chunks })) last = message;
  const parts = last?.parts.map((p) => ('text' in p ? `${p.type}: ${p.text}` : 'output' in p ? `${p.type}: ${JSON.stringify(p.output)}` : p.type));
  assert.deepEqual(parts, ['step-start', 'text: Let me calculate that. ', 'dynamic-tool: 42', 'step-start', 'text: The answer is 42.']);
});

test("the ai package's Chat with DefaultChatTransport talks to an agent: text, tool calls, a tool's error", async (t) => {
  const url = await serveDemo(t);
  const chat = new NodeChat(`${url}/calc-2/chat?stream=ui`);
  await chat.sendMessage({ text: 'What is 2+3?' });
  assert.equal(chat.status, 'ready', String(chat.error));
  assert.equal(chat.messages.length, 2);
  const reply = chat.messages[1] as UIMessage;
  assert.equal(reply.role, 'assistant');
  assert.ok(reply.parts.some((p) => p.type === 'dynamic-tool' && (p as { output?: unknown }).output === 5), JSON.stringify(reply.parts));
  await chat.sendMessage({ text: 'What is 1/0?' });
  const failed = (chat.messages[3] as UIMessage).parts.find((p) => p.type === 'dynamic-tool') as { state: string; errorText?: string };
  assert.equal(failed.state, 'output-error');
  assert.equal(failed.errorText, 'Cannot divide by zero');
  const echo = new NodeChat(`${url}/echo-9/chat?stream=ui`);
  await echo.sendMessage({ text: 'words come back' });
  const text = (echo.messages[1] as UIMessage).parts.filter((p) => p.type === 'text').map((p) => (p as { text: string }).text).join('');
  assert.equal(text, 'words come back');
});

test('a failed turn ends with an error part (errorText, code) then [DONE]; Chat reports it', async (t) => {
  const url = await serveModel(t, () => {
    throw new AgentRouterError(429, 'rate_limited', 'Slow down');
  });
  const res = await postUI(`${url}/x/chat?stream=ui`, { message: 'hi' });
  const chunks = await readChunks(res);
  assert.deepEqual(chunks.at(-1), { type: 'error', errorText: 'Slow down', code: 'rate_limited' });
  const chat = new NodeChat(`${url}/y/chat?stream=ui`);
  await chat.sendMessage({ text: 'hi' });
  assert.equal(chat.status, 'error');
  assert.equal(chat.error?.message, 'Slow down');
});

test('the DefaultChatTransport body: the last user message text parts are the message; bad bodies are 400', async (t) => {
  const url = await serveModel(t, (req) => `got: ${String(req.messages.at(-1)?.content)}`);
  const body = {
    id: 'c1', trigger: 'submit-message',
    messages: [
      { id: 'm1', role: 'user', parts: [{ type: 'text', text: 'first' }] },
      { id: 'm2', role: 'assistant', parts: [{ type: 'text', text: 'ignored' }] },
      { id: 'm3', role: 'user', parts: [{ type: 'text', text: 'sec' }, { type: 'file', url: 'x', mediaType: 'a/b' }, { type: 'text', text: 'ond' }] },
    ],
  };
  const json = await postJson(`${url}/x/chat`, body);
  assert.equal(json.status, 200);
  assert.equal(json.body['response'], 'got: second');
  for (const bad of [{ messages: [] }, { messages: [{ role: 'user', parts: [{ type: 'file' }] }] }, { messages: [{ role: 'assistant', parts: [{ type: 'text', text: 'x' }] }] }, { messages: 'no' }]) {
    const refused = await postJson(`${url}/x/chat?stream=ui`, bad);
    assert.equal(refused.status, 400, JSON.stringify(bad));
    assert.equal(refused.body['code'], 'missing_message');
  }
  const flag = await postJson(`${url}/x/chat?stream=uix`, { message: 'hi' });
  assert.equal(flag.status, 400);
  assert.match(String(flag.body['error']), /ui for the AI SDK/);
});

test('stream=ui counts against maxStreams, a held turn streams in pieces, and a client that leaves frees its slot', async (t) => {
  let release = (): void => {};
  const held = new Promise<void>((resolve) => (release = resolve));
  const url = await serveModel(t, async function* () {
    yield 'first';
    await held;
    yield ' last';
  });
  const capped = await serveCapped(t);
  const open = await postUI(`${capped.url}/a/chat?stream=ui`, { message: 'x' });
  const refused = await postUI(`${capped.url}/b/chat?stream=ui`, { message: 'x' });
  assert.equal(refused.status, 503);
  assert.equal((await refused.json()).code, 'too_many_streams');
  await open.body?.cancel();
  await waitFor(() => capped.router.openStreams === 0);
  const piece = await postUI(`${url}/c/chat?stream=ui`, { message: 'x' });
  release();
  const chunks = await readChunks(piece);
  assert.equal(chunks.filter((c) => c.type === 'text-delta').map((c) => (c as { delta: string }).delta).join(''), 'first last');
});

async function serveCapped(t: { after: (fn: () => Promise<void>) => void }) {
  class Slow extends Agent {
    constructor(id: string) {
      super(id, { model: scriptedModel(async function* () {
        yield 'a';
        await new Promise(() => {});
      }) });
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Slow);
  const router = new AgentRouter(registry, { maxStreams: 1, logger: { error: () => {} } });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  return { url, router };
}

async function waitFor(check: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  assert.ok(check());
}

test('rejoin ?stream=ui: a ui chat cut after some parts, then the ui rejoin gives the whole stream, as a fresh one, followed live', async (t) => {
  let release = (): void => {};
  const held = new Promise<void>((resolve) => (release = resolve));
  let holding = true;
  class Calc extends Agent {
    static override tools = { add: { description: 'Adds', parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } }, required: ['a', 'b'] } } };
    constructor(id: string) {
      super(id, {
        model: scriptedModel(async function* (request) {
          if (request.messages.at(-1)?.role !== 'tool') {
            yield 'Adding. ';
            yield { toolCall: { id: 'c1', name: 'add', arguments: '{"a":1,"b":2}' } };
            return;
          }
          yield 'It is ';
          if (holding) await held;
          yield '3.';
        }),
      });
    }
    add({ a, b }: { a: number; b: number }) {
      return a + b;
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Calc);
  const router = new AgentRouter(registry, { onDisconnect: 'continue', logger: { error: () => {} } });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);

  const controller = new AbortController();
  const first = await fetch(`${url}/a/chat?stream=ui`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"message":"1+2?"}', signal: controller.signal });
  const turnId = first.headers.get('turn-id') as string;
  const reader = (first.body as ReadableStream<Uint8Array>).getReader();
  let seen = '';
  while (!seen.includes('"It is "')) seen += new TextDecoder().decode((await reader.read()).value);
  controller.abort();
  await new Promise((resolve) => setTimeout(resolve, 20));

  // Joined while the turn still runs: the parts so far, then the live ones once the model goes on.
  const rejoined = await fetch(`${url}/a/turns/${turnId}/events?stream=ui`, { headers: { 'last-event-id': `${turnId}:3` } });
  assert.equal(rejoined.status, 200);
  assert.equal(rejoined.headers.get('x-vercel-ai-ui-message-stream'), 'v1');
  const raw = rejoined.clone();
  setTimeout(release, 20);
  const chunks = await readChunks(rejoined);
  const text = await raw.text();
  assert.doesNotMatch(text, /^(id|event):/m, 'no ids, no event names');
  assert.ok(text.endsWith('data: [DONE]\n\n'));

  holding = false;
  const fresh = await readChunks(await postUI(`${url}/b/chat?stream=ui`, { message: '1+2?' }));
  assert.deepEqual(chunks.map((c) => c.type), [
    'start', 'start-step', 'text-start', 'text-delta', 'text-end', 'tool-input-available', 'tool-output-available',
    'finish-step', 'start-step', 'text-start', 'text-delta', 'text-delta', 'text-end', 'finish-step', 'finish',
  ]);
  assert.deepEqual(chunks.slice(1), fresh.slice(1), 'the parts a fresh ui stream sends');
  assert.deepEqual(chunks[0], { type: 'start', messageId: turnId });
  const message = await lastMessage(chunks);
  assert.deepEqual(message.parts.filter((p) => p.type === 'text').map((p) => (p as { text: string }).text), ['Adding. ', 'It is 3.']);

  // Ended: the same again, whole.
  assert.deepEqual(await readChunks(await fetch(`${url}/a/turns/${turnId}/events?stream=ui`)), chunks);
});

async function lastMessage(chunks: UIMessageChunk[]): Promise<UIMessage> {
  const stream = new ReadableStream<UIMessageChunk>({ start(c) { for (const chunk of chunks) c.enqueue(chunk); c.close(); } });
  let last: UIMessage | undefined;
  for await (const message of readUIMessageStream({ stream })) last = message;
  return last as UIMessage;
}

/** A UI message's text parts, joined. */
function textOf(message: UIMessage | undefined): string {
  return (message?.parts ?? []).filter((p) => p.type === 'text').map((p) => (p as { text: string }).text).join('');
}

test("the ai package's Chat resumes a cut stream through the ui rejoin: the assistant message (its id is the turn's) is completed in place, not doubled", async (t) => {
  const steps = new Steps();
  const { url } = await serveWords(t, ['one', ' two', ' three', ' four'], {}, steps);
  // As an app would: the last assistant message's id names the turn to rejoin.
  const chat: NodeChat = new NodeChat(`${url}/bot/chat?stream=ui&on_disconnect=continue`, undefined, () => `${url}/bot/turns/${chat.messages.at(-1)?.id}/events?stream=ui`);
  steps.release(2);
  const sending = chat.sendMessage({ text: 'go' });
  while (textOf(chat.messages[1]) !== 'one two') await new Promise((resolve) => setTimeout(resolve, 5));
  await chat.stop(); // the connection is gone; the turn runs on (on_disconnect=continue)
  await sending;
  const turnId = chat.messages[1]?.id as string;
  steps.release();
  await chat.resumeStream();
  assert.equal(chat.status, 'ready', String(chat.error));
  assert.deepEqual(chat.messages.map((m) => [m.role, m.role === 'assistant' ? m.id : '', textOf(m)]), [['user', '', 'go'], ['assistant', turnId, 'one two three four']]);
});

test("the ai package's Chat stopped with on_disconnect=continue: stop() alone leaves the turn running; a cancel after it stops the turn, which stores nothing, and the next message runs at once", async (t) => {
  const steps = new Steps();
  const { url, storage } = await serveWords(t, ['one', ' two', ' three', ' four'], {}, steps);
  const chat = new NodeChat(`${url}/bot/chat?stream=ui&on_disconnect=continue`);
  steps.release(2);
  const sending = chat.sendMessage({ text: 'go' });
  while (textOf(chat.messages[1]) !== 'one two') await new Promise((resolve) => setTimeout(resolve, 5));
  await chat.stop();
  await sending;
  const turnId = chat.messages[1]?.id as string;
  // The connection is gone, the turn is not: a rejoin still follows it.
  const rejoined = await fetch(`${url}/bot/turns/${turnId}/events`);
  assert.equal(rejoined.status, 200);
  // The page's Stop button, as docs/guide/browser.md has it: no turn_id, the agent's running turn.
  const cancel = await fetch(`${url}/bot/cancel`, { method: 'POST' });
  assert.equal(cancel.status, 202);
  assert.deepEqual(await cancel.json(), { agent_id: 'bot', turn_id: turnId, cancelled: true });
  assert.match(await rejoined.text(), /event: error\nid: [^\n]+\ndata: \{[^\n]*"code":"cancelled"/);
  assert.equal(await storage.load('bot'), undefined, 'the cancelled turn stored its message or reply');
  steps.release();
  await chat.sendMessage({ text: 'again' });
  assert.equal(chat.status, 'ready', String(chat.error));
  assert.deepEqual(chat.messages.map((m) => [m.role, textOf(m)]), [['user', 'go'], ['assistant', 'one two'], ['user', 'again'], ['assistant', 'one two three four']]);
  const stored = await storage.load('bot');
  assert.deepEqual(stored?.messages.map((m) => [m.role, m.content]), [['user', 'again'], ['assistant', 'one two three four']]);
});
