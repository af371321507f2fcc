// A web chat page on one origin calling the router on another, in a real
// Chromium: the CORS preflight, errors, streaming from response.body and
// cancelling with AbortController, as the browser enforces them.
import assert from 'node:assert/strict';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { after, before, test } from 'node:test';
import type { Page } from 'playwright-core';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouter } from '../../src/router/router.ts';
import type { ModelRequest } from '../../src/models/model.ts';
import { scriptedModel } from '../../src/models/scripted.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentServer } from '../../src/server/server.ts';
import { readSSE, type SSEEvent } from '../../src/sse/parser.ts';
import { launchChromium, servePage, type Chromium, type PageReply, type PageStream, type PageWindow } from '../helpers/browser.ts';
import { deferred, streamChat } from '../helpers/http.ts';
import { listen, type Listening } from '../helpers/listen.ts';
import { noTurnId } from '../helpers/turns.ts';
import { withoutIds } from '../helpers/sse.ts';

const TOKEN = 'Bearer page-token';
const JSON_HEADERS = { 'content-type': 'application/json', authorization: TOKEN };
const STREAM_HEADERS = { ...JSON_HEADERS, accept: 'text/event-stream' };

/** What the model was sent each turn: the contents of the messages, history first. */
const asked: string[][] = [];
/** Replies by user message; any other message gets `you said: ...`. */
const replies = new Map<string, (request: ModelRequest) => AsyncIterable<string>>();

class ChatAgent extends Agent {
  constructor(id: string) {
    super(id, {
      model: scriptedModel((request) => {
        const said = request.messages.map((message) => message.content);
        asked.push(said);
        const last = said.at(-1) ?? '';
        return replies.get(last)?.(request) ?? [`you said: ${last}`];
      }),
    });
  }
}

const registry = new AgentRegistry();
registry.register('chat-[a-z0-9-]+', ChatAgent);
const logged: unknown[] = [];
const logger = { error: (message: string, error: unknown) => void logged.push([message, error]) };

let browser: Chromium;
/** The chat page's origin, allowed by the router's cors option, and another origin it does not allow. */
let pageA: Listening;
let pageC: Listening;
let routerB: Listening;
/** Every request the router got: `METHOD path origin`. */
const seen: string[] = [];
/** Called with the stream text the page has read so far, after each read. */
let onChunk: (text: string) => void = () => {};

before(async () => {
  pageA = await servePage();
  pageC = await servePage();
  const router = new AgentRouter(registry, {
    cors: { origins: [pageA.url] },
    authorize: (req) => req.headers.authorization === TOKEN,
    logger,
  });
  const listener = router.toRequestListener();
  routerB = await listen((req: IncomingMessage, res: ServerResponse) => {
    seen.push(`${req.method} ${req.url} ${req.headers.origin}`);
    listener(req, res);
  });
  browser = await launchChromium();
  await browser.context.exposeFunction('chunkSeen', (text: string) => onChunk(text));
});

after(async () => {
  await browser?.close();
  await Promise.all([pageA?.close(), pageC?.close(), routerB?.close()]);
});

/** Fails with `what` if the promise takes longer than 10 s. */
async function within<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after 10 s waiting for ${what}`)), 10_000);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

async function openPage(t: { after: (fn: () => Promise<void>) => void }, origin: Listening): Promise<Page> {
  const page = await browser.context.newPage();
  t.after(() => page.close());
  await page.goto(`${origin.url}/chat.html`);
  return page;
}

/** `fetch(url, init)` run by the page. */
function send(page: Page, url: string, init: RequestInit): Promise<PageReply> {
  return within(page.evaluate(([u, i]) => (window as unknown as PageWindow).send(u, i), [url, init] as const), `the page's fetch of ${url}`);
}

function chat(page: Page, url: string, message: string, headers: Record<string, string> = JSON_HEADERS): Promise<PageReply> {
  return send(page, url, { method: 'POST', headers, body: JSON.stringify({ message }) });
}

/** The page reads a chat stream; it aborts once the text holds `abortAfter`, if given. */
function readStream(page: Page, url: string, message: string, abortAfter?: string): Promise<PageStream> {
  return page.evaluate(
    ([u, m, h, a]) => (window as unknown as PageWindow).readStream(u, { message: m }, h, a),
    [url, message, STREAM_HEADERS, abortAfter] as const,
  );
}

function ok(reply: PageReply): { status: number; headers: Record<string, string>; text: string } {
  if (reply.error !== undefined) assert.fail(`the page's fetch rejected: ${reply.error}: ${reply.message}`);
  return reply;
}

async function parseSSE(text: string): Promise<SSEEvent[]> {
  const events: SSEEvent[] = [];
  for await (const event of readSSE(new Response(text).body as ReadableStream<Uint8Array>)) events.push(event);
  return events;
}

test('a page on another origin chats with an Authorization header: the browser preflights, then reads the reply', async (t) => {
  const page = await openPage(t, pageA);
  const reply = ok(await chat(page, `${routerB.url}/chat-1/chat`, 'hello from the page'));
  assert.equal(reply.status, 200);
  assert.deepEqual(noTurnId(JSON.parse(reply.text)), { agent_id: 'chat-1', response: 'you said: hello from the page' });
  assert.equal(reply.headers['content-type'], 'application/json; charset=utf-8');
  const here = seen.filter((line) => line.includes('/chat-1/chat'));
  assert.deepEqual(here, [`OPTIONS /chat-1/chat ${pageA.url}`, `POST /chat-1/chat ${pageA.url}`], 'one preflight, then the POST');
});

test('errors are JSON the page can read cross-origin: 404 unknown agent, 400 bad JSON, 403 without the token', async (t) => {
  const page = await openPage(t, pageA);
  const unknown = ok(await chat(page, `${routerB.url}/nobody/chat`, 'hi'));
  assert.equal(unknown.status, 404);
  assert.equal(JSON.parse(unknown.text).code, 'agent_not_found');

  const bad = ok(await send(page, `${routerB.url}/chat-2/chat`, { method: 'POST', headers: JSON_HEADERS, body: '{"message": ' }));
  assert.equal(bad.status, 400);
  assert.deepEqual(JSON.parse(bad.text), { error: 'Invalid JSON body', code: 'invalid_json' });

  const refused = ok(await chat(page, `${routerB.url}/chat-2/chat`, 'hi', { 'content-type': 'application/json' }));
  assert.equal(refused.status, 403);
  assert.equal(JSON.parse(refused.text).code, 'forbidden');
});

test('a page on an origin cors does not allow is blocked by the browser; the model never runs and the router keeps serving', async (t) => {
  const page = await openPage(t, pageC);
  const blocked = await chat(page, `${routerB.url}/chat-3/chat`, 'from the wrong origin');
  assert.equal(blocked.error, 'TypeError', 'fetch rejects with TypeError (a CORS failure)');
  assert.ok(seen.includes(`OPTIONS /chat-3/chat ${pageC.url}`), 'the browser asked first');
  assert.ok(!seen.includes(`POST /chat-3/chat ${pageC.url}`), 'the refused preflight kept the POST from being sent');
  assert.ok(!asked.some((said) => said.includes('from the wrong origin')), 'the model never ran');

  // A request that needs no preflight reaches the server, but the page may not read the answer.
  const read = await send(page, `${routerB.url}/chat-3/state`, {});
  assert.equal(read.error, 'TypeError');

  const allowed = ok(await chat(await openPage(t, pageA), `${routerB.url}/chat-3/chat`, 'still there?'));
  assert.deepEqual(noTurnId(JSON.parse(allowed.text)), { agent_id: 'chat-3', response: 'you said: still there?' });
});

test('a stream reaches the page chunk by chunk as the model makes it, and ends with event: done', async (t) => {
  const release = deferred();
  let released = false;
  replies.set('stream please', async function* () {
    yield 'Hello';
    await release.promise;
    released = true;
    yield ' world';
    yield '!\nBye';
  });
  const first = deferred<string>();
  onChunk = (text) => {
    if (text.includes('data: Hello')) first.resolve(text);
  };
  t.after(() => {
    onChunk = () => {};
    release.resolve();
  });
  const page = await openPage(t, pageA);
  const reading = readStream(page, `${routerB.url}/chat-4/chat?stream=true`, 'stream please');

  const sofar = await within(first.promise, 'the first chunk to reach the page');
  assert.equal(released, false, 'the page had the first chunk while the model still held the rest');
  assert.equal(withoutIds(sofar), 'data: Hello\n\n');
  release.resolve();

  const stream = await within(reading, 'the stream to end');
  assert.equal(stream.error, undefined);
  assert.equal(stream.status, 200);
  assert.equal(stream.contentType, 'text/event-stream');
  assert.ok(withoutIds(stream.text).endsWith('event: done\ndata: [DONE]\n\n'), stream.text);
  const events = await parseSSE(stream.text);
  assert.equal(events.filter((e) => e.event === 'message').map((e) => e.data).join(''), 'Hello world!\nBye');
  // Every event names the turn and its place in it: <turn_id>:1, :2, ... (a reconnecting EventSource sends it back).
  const turn = /^([0-9a-f-]{36}):1$/.exec(events[0]?.id ?? '')?.[1];
  assert.ok(turn !== undefined, `the first event's id: ${String(events[0]?.id)}`);
  assert.deepEqual(events.map((e) => e.id), events.map((_e, i) => `${turn}:${i + 1}`));
  assert.deepEqual(events.at(-1), { event: 'done', data: '[DONE]', id: `${turn}:${events.length}` });
});

test('the page aborts a stream: the turn\'s signal aborts, the history keeps no half turn, the router keeps serving', async (t) => {
  const aborted = deferred<unknown>();
  replies.set('cancel me', async function* (request) {
    yield 'partial';
    await new Promise((resolve) => request.signal.addEventListener('abort', resolve, { once: true }));
    aborted.resolve(request.signal.reason);
    throw request.signal.reason;
  });
  const page = await openPage(t, pageA);
  const stream = await within(readStream(page, `${routerB.url}/chat-5/chat?stream=true`, 'cancel me', 'data: partial'), 'the page to abort its stream');
  assert.deepEqual({ ...stream, text: withoutIds(stream.text) }, { status: 200, text: 'data: partial\n\n', error: 'AbortError' });

  const reason = await within(aborted.promise, "the model request's signal to abort");
  assert.equal((reason as { code?: unknown }).code, 'client_closed');

  const next = ok(await chat(page, `${routerB.url}/chat-5/chat`, 'after the cancel'));
  assert.deepEqual(noTurnId(JSON.parse(next.text)), { agent_id: 'chat-5', response: 'you said: after the cancel' });
  assert.deepEqual(asked.at(-1), ['after the cancel'], 'the cancelled turn left nothing in the history');
  assert.deepEqual(logged, []);
});

test('AgentServer: its cors option reaches the browser, and a 429 shows the page its JSON and Retry-After', async (t) => {
  const slot = deferred();
  const server = new AgentServer(registry, { cors: { origins: [pageA.url] }, maxAgents: 1, logger });
  await server.serve(0);
  // The held stream ends first: close() would wait for it.
  t.after(() => {
    slot.resolve();
    return server.close();
  });
  const base = `${server.url}/agent`;
  const page = await openPage(t, pageA);
  const reply = ok(await chat(page, `${base}/chat-6/chat`, 'hello server'));
  assert.deepEqual(noTurnId(JSON.parse(reply.text)), { agent_id: 'chat-6', response: 'you said: hello server' });

  // The one live agent is busy with a stream, so a new agent id is refused.
  replies.set('hold the slot', async function* () {
    yield 'held';
    await slot.promise;
  });
  const held = await streamChat(`${base}/chat-7/chat`, 'hold the slot');
  const reader = (held.body as ReadableStream<Uint8Array>).getReader();
  await within(reader.read(), 'the held stream to start');

  const busy = ok(await chat(page, `${base}/chat-8/chat`, 'any room?'));
  assert.equal(busy.status, 429);
  assert.equal(JSON.parse(busy.text).code, 'too_many_agents');
  assert.equal(busy.headers['retry-after'], '1', 'the page can read how long to wait (CORS exposes Retry-After)');

  slot.resolve();
  while (!(await within(reader.read(), 'the held stream to end')).done);
  const later = ok(await chat(page, `${base}/chat-8/chat`, 'any room?'));
  assert.equal(later.status, 200);
});

test('a page on any site cannot drive an agent with a body that has no Content-Type (no preflight): 415, the model never runs', async (t) => {
  // No cors and no authorize: an agent on localhost, trusted because only this machine reaches it.
  const answered: string[] = [];
  const listener = new AgentRouter(registry, { logger }).toRequestListener();
  const open = await listen((req: IncomingMessage, res: ServerResponse) => {
    res.on('finish', () => answered.push(`${req.method} ${req.url} ${req.headers.origin} ${res.statusCode}`));
    listener(req, res);
  });
  t.after(() => open.close());
  const page = await openPage(t, pageC);
  // What an attacker's page sends: a Blob body has no type, so the request is "simple" and goes without a preflight.
  const body = JSON.stringify({ message: 'sent by another site' });
  const reply = await within(
    page.evaluate(async ([url, text]) => {
      const res = await fetch(url, { method: 'POST', mode: 'no-cors', body: new Blob([text]) });
      return res.type;
    }, [`${open.url}/chat-9/chat`, body] as const),
    'the cross-site fetch',
  );
  assert.equal(reply, 'opaque', 'the browser sent it and hid the answer from the page');
  assert.deepEqual(answered, [`POST /chat-9/chat ${pageC.url} 415`], 'it reached the server without a preflight, and was refused');
  assert.ok(!asked.some((said) => said.includes('sent by another site')), 'the model never ran');
});

test('EventSource cannot open a chat stream (GET only, no body): an error event, and no retry, as the README says', async (t) => {
  const page = await openPage(t, pageA);
  const before = seen.length;
  const url = `${routerB.url}/chat-10/chat?stream=true`;
  const state = await within(page.evaluate((u) => new Promise<number>((resolve) => {
    const source = new EventSource(u);
    source.onerror = () => resolve(source.readyState);
  }), url), 'the EventSource to fail');
  assert.equal(state, 2, 'CLOSED: an answer other than 200 is not retried (a retry would leave it CONNECTING, 0)');
  assert.deepEqual(seen.slice(before), [`GET /chat-10/chat?stream=true ${pageA.url}`], 'one GET, never repeated');
});
