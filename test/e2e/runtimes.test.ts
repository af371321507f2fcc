// The standalone demo (the CLI) and toRequestListener() on node:http, run by Bun and by Deno
// from the TypeScript source: chat (JSON and each stream), invoke, state, over real HTTP.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { test, type TestContext } from 'node:test';
import { parseJsonEventStream, uiMessageChunkSchema, type UIMessageChunk } from 'ai';
import { readSSE, type SSEEvent } from '../../src/sse/parser.ts';

const root = process.cwd();
const RUNTIMES: Record<string, string[]> = {
  bun: [path.join(root, 'node_modules/.bin/bun')],
  deno: [path.join(root, 'node_modules/.bin/deno'), 'run', '-A', '--no-check'],
};

/** Starts `file` under the runtime; resolves with the URL it prints, or rejects with its output (never hangs). */
async function start(t: TestContext, runtime: string, file: string, args: string[]): Promise<{ url: string; stop: () => Promise<number | null> }> {
  const [command, ...pre] = RUNTIMES[runtime] as string[];
  const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1', DENO_NO_UPDATE_CHECK: '1' };
  for (const name of ['PORT', 'OPENAI_API_KEY', 'ANTHROPIC_API_KEY']) delete env[name];
  const child = spawn(command as string, [...pre, path.join(root, file), ...args], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.setEncoding('utf8').on('data', (text: string) => (out += text));
  child.stderr.setEncoding('utf8').on('data', (text: string) => (out += text));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  t.after(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    return exited;
  });
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${runtime} did not listen within 30 s:\n${out}`)), 30_000);
    child.stdout.on('data', () => {
      const match = /listening on (http:\/\/\S+)/.exec(out);
      if (match !== null) {
        clearTimeout(timer);
        resolve(match[1] as string);
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${runtime} exited (${code}) before listening:\n${out}`));
    });
  });
  return {
    url,
    stop: async () => {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

async function post(url: string, body: unknown): Promise<Response> {
  return fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(10_000) });
}

async function events(res: Response): Promise<SSEEvent[]> {
  const all: SSEEvent[] = [];
  for await (const event of readSSE(res.body as ReadableStream<Uint8Array>)) all.push(event);
  return all;
}

/** Every route a client uses, against an agent server at `base` (`.../agent`). */
async function exercise(base: string): Promise<void> {
  const chat = await post(`${base}/echo-1/chat`, { message: 'Hello from a runtime' });
  assert.equal(chat.status, 200);
  assert.equal((await chat.json()).response, 'Hello from a runtime');

  const plain = await events(await post(`${base}/echo-2/chat?stream=true`, { message: 'three streamed words' }));
  assert.deepEqual(plain.map((e) => e.data), ['three', ' streamed', ' words', '[DONE]']);

  const typed = await events(await post(`${base}/calc-1/chat?stream=events`, { message: 'What is 6*7?' }));
  assert.deepEqual(typed.map((e) => e.event), ['turn.started', 'text.delta', 'tool.call', 'tool.result', 'text.delta', 'turn.finished']);
  assert.equal(JSON.parse(typed.at(-1)?.data as string).result.text, 'Let me calculate that. The answer is 42.');

  const ui = await post(`${base}/calc-2/chat?stream=ui`, { id: 'c', trigger: 'submit-message', messages: [{ id: 'm', role: 'user', parts: [{ type: 'text', text: 'What is 2+3?' }] }] });
  assert.equal(ui.headers.get('x-vercel-ai-ui-message-stream'), 'v1');
  const parts: UIMessageChunk[] = [];
  for await (const parsed of parseJsonEventStream({ stream: ui.body as ReadableStream<Uint8Array>, schema: uiMessageChunkSchema }) as unknown as AsyncIterable<{ success: boolean; value: UIMessageChunk }>) {
    assert.ok(parsed.success);
    parts.push(parsed.value);
  }
  assert.ok(parts.some((p) => p.type === 'tool-output-available' && p.output === 5), JSON.stringify(parts));

  const invoke = await post(`${base}/counter-1/invoke`, { method: 'increment', params: { by: 2 } });
  assert.deepEqual(await invoke.json(), { agent_id: 'counter-1', turn_id: invoke.headers.get('turn-id'), result: 2 });
  const state = await fetch(`${base}/counter-1/state`);
  assert.deepEqual(await state.json(), { agent_id: 'counter-1', state: { count: 2 } });

  const missing = await post(`${base}/counter-1/invoke`, { method: 'nope' });
  assert.equal(missing.status, 404);
  await missing.body?.cancel();
}

for (const runtime of Object.keys(RUNTIMES)) {
  test(`${runtime}: the CLI's demo server serves chat, every stream, invoke, state, the playground, stops on SIGTERM, and its files keep the state`, async (t) => {
    const data = await mkdtemp(path.join(os.tmpdir(), `agent-router-${runtime}-`));
    t.after(() => rm(data, { recursive: true, force: true }));
    const server = await start(t, runtime, 'src/cli/main.ts', ['serve', '--port', '0', '--data-dir', data]);
    await exercise(`${server.url}/agent`);
    assert.deepEqual(await (await fetch(`${server.url}/healthz`)).json(), { status: 'ok' });
    const page = await fetch(`${server.url}/playground`);
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-security-policy') ?? '', /script-src 'sha256-/);
    await page.body?.cancel();
    assert.equal(await server.stop(), 0);
    const again = await start(t, runtime, 'src/cli/main.ts', ['serve', '--port', '0', '--data-dir', data]);
    assert.deepEqual(await (await fetch(`${again.url}/agent/counter-1/state`)).json(), { agent_id: 'counter-1', state: { count: 2 } });
    assert.equal(await again.stop(), 0);
  });

  test(`${runtime}: toRequestListener() on its node:http`, async (t) => {
    const server = await start(t, runtime, 'test/helpers/runtime-listener.ts', []);
    await exercise(`${server.url}/agent`);
    // A client that leaves mid-stream cuts its turn: the agent's next turn does not wait behind it.
    const leaving = new AbortController();
    const held = await fetch(`${server.url}/agent/hold-1/chat?stream=true`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"message":"hold"}', signal: leaving.signal });
    const reader = (held.body as ReadableStream<Uint8Array>).getReader();
    assert.match(new TextDecoder().decode((await reader.read()).value), /held/);
    leaving.abort();
    const next = await post(`${server.url}/agent/hold-1/chat`, { message: 'next' });
    assert.equal((await next.json()).response, 'quick');
    await server.stop();
  });
}

test('deno without permissions: the CLI exits at once naming the flag it needs, instead of hanging', async () => {
  const deno = RUNTIMES['deno'] as string[];
  const child = spawn(deno[0] as string, ['run', '--no-check', path.join(root, 'src/cli/main.ts'), 'serve', '--port', '0', '--storage', 'memory'], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1' } });
  let out = '';
  child.stderr.setEncoding('utf8').on('data', (text: string) => (out += text));
  const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  clearTimeout(timer);
  assert.notEqual(code, 0);
  assert.notEqual(code, null, 'killed: it hung');
  assert.match(out, /--allow-env/);
});
