/**
 * Every file in examples/ runs as a user's project would run it (dist/ installed as `agent-router`,
 * the frameworks and drivers it imports beside it), and answers the requests its comments promise.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { test, type TestContext } from 'node:test';
import { freePort, runExample } from '../helpers/readme-example.ts';
import { listen } from '../helpers/listen.ts';
import { noTurnId } from '../helpers/turns.ts';
import { withoutIds } from '../helpers/sse.ts';

const root = process.cwd();
const source = (name: string): string => readFileSync(path.join(root, 'examples', name), 'utf8');

async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  return { status: res.status, text: await res.text() };
}

/** Runs `name` with its port (8000 or 8080, as written) swapped for a free one; returns that port. */
async function run(t: TestContext, name: string, options: Parameters<typeof runExample>[3] = {}, swap: Record<string, number> = {}): Promise<number> {
  const port = await freePort();
  let code = source(name).replaceAll(/\b80[08]0\b/g, String(port));
  for (const [from, to] of Object.entries(swap)) code = code.replaceAll(from, String(to));
  await runExample(t, code, port, options);
  return port;
}

test('examples/: every runnable file has a test here', () => {
  // postgres.mjs and redis.mjs run against the real servers in readme-storage.test.ts.
  const covered = readFileSync(path.join(root, 'test/e2e/examples.test.ts'), 'utf8') + readFileSync(path.join(root, 'test/e2e/readme-storage.test.ts'), 'utf8');
  for (const file of readdirSync(path.join(root, 'examples')).filter((f) => f.endsWith('.mjs'))) {
    assert.ok(covered.includes(`'${file}'`), `test/e2e/examples.test.ts runs examples/${file}`);
  }
});

test('node-http.mjs: chat, invoke, state and a stream', async (t) => {
  const port = await run(t, 'node-http.mjs');
  const base = `http://127.0.0.1:${port}/counter-1`;
  assert.deepEqual(noTurnId(JSON.parse((await post(`${base}/chat`, { message: 'hello' })).text)), {"agent_id":"counter-1","response":"hello"});
  assert.deepEqual(noTurnId(JSON.parse((await post(`${base}/invoke`, { method: 'increment', params: { by: 2 } })).text)), {"agent_id":"counter-1","result":2});
  assert.equal(await (await fetch(`${base}/state`)).text(), '{"agent_id":"counter-1","state":{"count":2}}');
  assert.equal(withoutIds((await post(`${base}/chat?stream=true`, { message: 'hi there' })).text), 'data: hi\n\ndata:  there\n\nevent: done\ndata: [DONE]\n\n');
});

test('standalone-server.mjs: serves /agent/{id}/chat and /healthz', async (t) => {
  const port = await run(t, 'standalone-server.mjs');
  assert.deepEqual(noTurnId(JSON.parse((await post(`http://127.0.0.1:${port}/agent/bot-1/chat`, { message: 'hello' })).text)), {"agent_id":"bot-1","response":"hello"});
  assert.equal(await (await fetch(`http://127.0.0.1:${port}/healthz`)).text(), '{"status":"ok"}');
});

for (const [file, aliases] of [
  ['express.mjs', { express: 'express5' }],
  ['koa.mjs', { koa: 'koa3', '@koa/bodyparser': '@koa/bodyparser' }],
  ['fastify.mjs', { fastify: 'fastify5' }],
] as const) {
  test(`${file}: the router under /api, and the app's own route beside it`, async (t) => {
    const port = await run(t, file, { aliases });
    assert.deepEqual(noTurnId(JSON.parse((await post(`http://127.0.0.1:${port}/api/bot-1/chat`, { message: 'hello' })).text)), {"agent_id":"bot-1","response":"hello"});
    assert.equal(withoutIds((await post(`http://127.0.0.1:${port}/api/bot-1/chat?stream=true`, { message: 'a b' })).text), 'data: a\n\ndata:  b\n\nevent: done\ndata: [DONE]\n\n');
    assert.equal(await (await fetch(`http://127.0.0.1:${port}/api/health`)).text(), 'ok');
  });
}

test('remote-back.mjs and remote-front.mjs: a remote-* id is served by the back, through the front', async (t) => {
  // remote-back.mjs listens on 8001 as written; run it on a free port and point the front at that one.
  const back = await freePort();
  await runExample(t, source('remote-back.mjs').replaceAll('8001', String(back)), back);
  const front = await run(t, 'remote-front.mjs', {}, { '8001': back });
  assert.deepEqual(noTurnId(JSON.parse((await post(`http://127.0.0.1:${front}/remote-1/chat`, { message: 'from afar' })).text)), {"agent_id":"remote-1","response":"from afar"});
  assert.deepEqual(noTurnId(JSON.parse((await post(`http://127.0.0.1:${back}/agent/remote-1/chat`, { message: 'direct' })).text)), {"agent_id":"remote-1","response":"direct"});
  assert.equal(withoutIds((await post(`http://127.0.0.1:${front}/remote-1/chat?stream=true`, { message: 'x y' })).text), 'data: x\n\ndata:  y\n\nevent: done\ndata: [DONE]\n\n');
  assert.deepEqual(noTurnId(JSON.parse((await post(`http://127.0.0.1:${front}/local-1/chat`, { message: 'here' })).text)), {"agent_id":"local-1","response":"here"});
});

test('file-storage.mjs: the conversation is a journal file under ./data/agents', async (t) => {
  const port = await freePort();
  const example = await runExample(t, source('file-storage.mjs').replaceAll('8080', String(port)), port);
  assert.equal((await post(`http://127.0.0.1:${port}/agent/bot-1/chat`, { message: 'remember me' })).status, 200);
  const files = readdirSync(path.join(example.project, 'data', 'agents'));
  assert.ok(files.some((f) => readFileSync(path.join(example.project, 'data', 'agents', f), 'utf8').includes('remember me')), files.join());
});

test('openai-compatible.mjs: chats with the server at OPENAI_BASE_URL', async (t) => {
  let received: { url?: string | undefined; body?: { model?: string } } = {};
  const provider = (req: http.IncomingMessage, res: http.ServerResponse): void => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      received = { url: req.url, body: JSON.parse(body) };
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end('data: {"choices":[{"delta":{"content":"Hi from"}}]}\n\ndata: {"choices":[{"delta":{"content":" the model"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n');
    });
  };
  const { url, close } = await listen(provider);
  t.after(close);
  const port = await freePort();
  await runExample(t, source('openai-compatible.mjs').replaceAll('8080', String(port)), port, { env: { OPENAI_BASE_URL: `${url}/v1`, OPENAI_MODEL: 'tiny' } });
  assert.deepEqual(noTurnId(JSON.parse((await post(`http://127.0.0.1:${port}/agent/assistant-1/chat`, { message: 'hello' })).text)), {"agent_id":"assistant-1","response":"Hi from the model"});
  assert.equal(received.url, '/v1/chat/completions');
  assert.equal(received.body?.model, 'tiny');
});

test('approval.mjs: a small refund runs, a large one waits for a decision, approved or refused', async (t) => {
  const port = await run(t, 'approval.mjs');
  const base = `http://127.0.0.1:${port}/agent/shop`;
  const small = noTurnId(JSON.parse((await post(`${base}/chat`, { message: 'refund 40 please' })).text));
  assert.deepEqual(small, { agent_id: 'shop', response: 'Refund: {"refunded":40}', tool_calls: [{ id: 'call_0_0', name: 'refund', arguments: { amount: 40 }, result: { refunded: 40 } }] });
  const waiting = noTurnId(JSON.parse((await post(`${base}/chat`, { message: 'refund 120 please' })).text));
  assert.deepEqual(waiting, { agent_id: 'shop', response: '', pending_approvals: [{ id: 'call_2_0', name: 'refund', arguments: { amount: 120 } }] });
  assert.equal((await post(`${base}/chat`, { message: 'hello?' })).status, 409, 'a chat while a call waits is approval_pending');
  const approved = noTurnId(JSON.parse((await post(`${base}/approvals`, { decisions: [{ id: 'call_2_0', approved: true }] })).text));
  assert.equal(approved.response, 'Refund: {"refunded":120}');
  await post(`${base}/chat`, { message: 'refund 500 please' });
  const pending = JSON.parse(await (await fetch(`${base}/approvals`)).text()).pending_approvals;
  const refused = noTurnId(JSON.parse((await post(`${base}/approvals`, { decisions: [{ id: pending[0].id, approved: false, reason: 'over the limit' }] })).text));
  assert.deepEqual(refused.tool_calls[0].error, { message: 'A person refused the call of refund; it did not run: over the limit', code: 'tool_refused' });
});

test('turns.mjs: a dropped stream rejoined after its second event, a cancel, and a busy agent refusing or interrupted', async (t) => {
  const port = await run(t, 'turns.mjs');
  const base = `http://127.0.0.1:${port}`;
  const chat = (path: string, message: string, signal?: AbortSignal) =>
    fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ message }), ...(signal === undefined ? {} : { signal }) });

  // Rejoin: the client leaves after two words; the turn runs on, and the rejoin gets the rest, each once.
  const leave = new AbortController();
  const dropped = await chat('/bot-1/chat?stream=true&on_disconnect=continue', 'one two three four five six', leave.signal);
  const turn = dropped.headers.get('turn-id') as string;
  const reader = (dropped.body as ReadableStream<Uint8Array>).getReader();
  const decoder = new TextDecoder();
  let seen = '';
  while (!seen.includes('data: two')) seen += decoder.decode((await reader.read()).value, { stream: true });
  leave.abort();
  const rejoined = await fetch(`${base}/bot-1/turns/${turn}/events`, { headers: { 'last-event-id': `${turn}:2` } });
  assert.equal(await rejoined.text(), ['three', 'four', 'five', 'six'].map((word, i) => `id: ${turn}:${i + 3}\ndata: ${word} \n\n`).join('') + `event: done\nid: ${turn}:7\ndata: [DONE]\n\n`);

  // Cancel: the running turn's stream ends with code cancelled.
  const unwanted = await chat('/bot-2/chat?stream=true', 'a long reply nobody wants');
  const cancelled = await post(`${base}/bot-2/cancel`, {});
  assert.equal(cancelled.status, 202);
  assert.deepEqual(JSON.parse(cancelled.text), { agent_id: 'bot-2', turn_id: unwanted.headers.get('turn-id'), cancelled: true });
  assert.match(await unwanted.text(), /event: error\nid: [^\n]+\ndata: \{"error":"Turn \\"[^"\\]+\\" was cancelled","code":"cancelled"\}\n\n$/);

  // Busy: reject answers 409 at once; interrupt cancels the running turn and runs.
  const first = await chat('/bot-3/chat?stream=true', 'first come first served');
  const refused = await chat('/bot-3/chat?when_busy=reject', 'me too');
  assert.deepEqual([refused.status, refused.headers.get('retry-after'), await refused.json()], [409, '1', { error: 'Agent "bot-3" is running a turn; retry shortly', code: 'agent_busy' }]);
  const instead = await post(`${base}/bot-3/chat?when_busy=interrupt`, { message: 'instead' });
  assert.deepEqual(noTurnId(JSON.parse(instead.text)), { agent_id: 'bot-3', response: 'instead ' });
  assert.match(await first.text(), /"code":"cancelled"\}\n\n$/);
});
