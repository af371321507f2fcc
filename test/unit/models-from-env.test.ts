import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'node:test';
import { DEFAULT_ANTHROPIC_MODEL, DEFAULT_OPENAI_MODEL, modelFromEnv } from '../../src/models/from-env.ts';
import type { Model } from '../../src/models/model.ts';

const offline: Model = {
  name: 'offline',
  async *stream() {
    yield 'offline';
  },
};
const fallback = (): Model => offline;

test('without provider variables the fallback model is used', () => {
  assert.equal(modelFromEnv({}, fallback), offline);
  assert.equal(modelFromEnv({ OPENAI_API_KEY: '', ANTHROPIC_API_KEY: '  ' }, fallback), offline);
});

test('without provider variables and without a fallback, the error names the variables', () => {
  assert.throws(() => modelFromEnv({}), /OPENAI_API_KEY.*ANTHROPIC_API_KEY.*fallback/);
});

test('OPENAI_API_KEY picks the OpenAI model, OPENAI_MODEL names it', () => {
  assert.equal(modelFromEnv({ OPENAI_API_KEY: 'sk-x' }, fallback).name, `openai:${DEFAULT_OPENAI_MODEL}`);
  assert.equal(modelFromEnv({ OPENAI_API_KEY: 'sk-x', OPENAI_MODEL: 'gpt-4.1' }, fallback).name, 'openai:gpt-4.1');
});

test('OPENAI_BASE_URL alone picks an OpenAI-compatible local server', () => {
  const model = modelFromEnv({ OPENAI_BASE_URL: 'http://localhost:11434/v1', OPENAI_MODEL: 'llama3.2' }, fallback);
  assert.equal(model.name, 'openai:llama3.2');
});

test('ANTHROPIC_API_KEY picks the Anthropic model; OpenAI wins when both are set', () => {
  assert.equal(modelFromEnv({ ANTHROPIC_API_KEY: 'k' }, fallback).name, `anthropic:${DEFAULT_ANTHROPIC_MODEL}`);
  assert.equal(modelFromEnv({ ANTHROPIC_API_KEY: 'k', ANTHROPIC_MODEL: 'claude-opus-4-1' }, fallback).name, 'anthropic:claude-opus-4-1');
  assert.equal(modelFromEnv({ ANTHROPIC_API_KEY: 'k', OPENAI_API_KEY: 'sk-x' }, fallback).name, `openai:${DEFAULT_OPENAI_MODEL}`);
});

test('a malformed base URL fails at startup with a message that names the variable and the fix', () => {
  assert.throws(() => modelFromEnv({ OPENAI_BASE_URL: 'localhost:11434' }, fallback), /OPENAI_BASE_URL must be an absolute http\(s\) URL, e\.g\. http:\/\/localhost:11434\/v1$/);
  // Not quoted: a key pasted into the wrong variable must not reach a log.
  assert.throws(() => modelFromEnv({ OPENAI_BASE_URL: 'sk-proj-SECRET0123456789' }, fallback), (error: Error) => !error.message.includes('SECRET'));
  assert.throws(() => modelFromEnv({ ANTHROPIC_API_KEY: 'k', ANTHROPIC_BASE_URL: 'nope' }, fallback), /ANTHROPIC_BASE_URL must be an absolute http\(s\) URL/);
});

test('a key that fetch could not send (a line break, a character outside Latin-1) fails at startup, named by its variable, not shown', () => {
  for (const key of ['sk-proj-SECRET\nSECRET0123456789', 'sk-proj-SECRET0123456789\u201d', 'sk-proj-SECRET\u0000x']) {
    for (const name of ['OPENAI_API_KEY', 'ANTHROPIC_API_KEY']) {
      assert.throws(() => modelFromEnv({ [name]: key }, fallback), (error: Error) => {
        assert.ok(error instanceof TypeError);
        assert.match(error.message, new RegExp(`modelFromEnv: ${name} holds a line break`));
        assert.doesNotMatch(error.message, /SECRET/);
        return true;
      });
    }
  }
  // A trailing line end (a key file read whole) is trimmed, as fetch would.
  assert.equal(modelFromEnv({ OPENAI_API_KEY: 'sk-x\n' }, fallback).name, `openai:${DEFAULT_OPENAI_MODEL}`);
});

/** A provider stand-in that answers every request with `stream` (a whole SSE reply) and records the paths asked for. */
async function pathsServer(t: { after: (fn: () => void) => void }, stream: string): Promise<{ root: string; paths: string[] }> {
  const paths: string[] = [];
  const server = http.createServer((req, res) => {
    paths.push(req.url ?? '');
    req.resume();
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(stream);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => server.close());
  return { root: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, paths };
}

test("ANTHROPIC_BASE_URL is read as Anthropic's SDKs read it, the API's root: /v1 is added unless it ends so", async (t) => {
  const { root, paths } = await pathsServer(t, 'event: message_stop\ndata: {"type": "message_stop"}\n\n');
  for (const base of [root, `${root}/`, `${root}/v1`, `${root}/gateway/anthropic`, `${root}/gw?x=1`, `${root}/gw/v1/?x=1`]) {
    const model = modelFromEnv({ ANTHROPIC_API_KEY: 'k', ANTHROPIC_BASE_URL: base }, fallback);
    for await (const _chunk of model.stream({ system: undefined, messages: [{ role: 'user', content: 'hi' }], signal: AbortSignal.timeout(5000) }));
  }
  assert.deepEqual(paths, ['/v1/messages', '/v1/messages', '/v1/messages', '/gateway/anthropic/v1/messages', '/gw/v1/messages?x=1', '/gw/v1/messages?x=1']);
});

test('OPENAI_BASE_URL with a query (older Azure OpenAI) keeps it after the path', async (t) => {
  const { root, paths } = await pathsServer(t, 'data: [DONE]\n\n');
  const model = modelFromEnv({ OPENAI_BASE_URL: `${root}/openai/deployments/gpt4o/?api-version=2024-10-21` }, fallback);
  for await (const _chunk of model.stream({ system: undefined, messages: [{ role: 'user', content: 'hi' }], signal: AbortSignal.timeout(5000) }));
  assert.deepEqual(paths, ['/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21']);
});

test('reads process.env by default', () => {
  const saved = { ...process.env };
  try {
    for (const name of ['OPENAI_API_KEY', 'OPENAI_BASE_URL', 'OPENAI_MODEL', 'ANTHROPIC_API_KEY']) delete process.env[name];
    process.env['ANTHROPIC_API_KEY'] = 'k';
    assert.equal(modelFromEnv(undefined, fallback).name, `anthropic:${DEFAULT_ANTHROPIC_MODEL}`);
  } finally {
    for (const name of Object.keys(process.env)) if (!(name in saved)) delete process.env[name];
    Object.assign(process.env, saved);
  }
});
