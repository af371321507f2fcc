import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { Validator } from '@seriousme/openapi-schema-validator';
import { Agent } from '../../src/agent/agent.ts';
import { echoModel } from '../../src/models/echo.ts';
import { scriptedModel } from '../../src/models/scripted.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { readConfigFile } from '../../src/server/config.ts';
import { AgentServer } from '../../src/server/server.ts';
import { postJson, streamChat } from '../helpers/http.ts';
import { collectSSE } from '../helpers/sse.ts';
import { eventsOf, serveWords, Steps, take } from '../helpers/turns-serve.ts';

const WORDS = ['one', ' two', ' three'];

function assertRefused(reply: { status: number; headers: Headers; body: { code: string } }, status: number, code: string): void {
  assert.deepEqual([reply.status, reply.body.code, reply.headers.get('retry-after')], [status, code, '1']);
}

test('whenBusy reject: 409 agent_busy with Retry-After while a turn runs and while one waits (chat and invoke); ?when_busy=enqueue overrides it', async (t) => {
  const steps = new Steps();
  const { url, storage } = await serveWords(t, WORDS, { whenBusy: 'reject' }, steps);
  const running = await streamChat(`${url}/bot/chat`, 'first');
  assertRefused(await postJson(`${url}/bot/chat`, { message: 'no' }), 409, 'agent_busy');
  assertRefused(await postJson(`${url}/bot/invoke`, { method: 'anything' }), 409, 'agent_busy');
  assertRefused(await postJson(`${url}/bot`, { action: 'chat', message: 'no' }), 409, 'agent_busy');
  const refusedStream = await streamChat(`${url}/bot/chat`, 'no');
  assert.equal(refusedStream.status, 409, 'a stream request is refused before any stream opens');
  await refusedStream.body?.cancel();
  const other = await streamChat(`${url}/other/chat`, 'hi');
  assert.equal(other.status, 200, 'another agent is not busy');
  await other.body?.cancel();
  const queued = await streamChat(`${url}/bot/chat`, 'second', { query: '?stream=true&when_busy=enqueue' });
  assert.equal(queued.status, 200);
  // The running turn cancelled: the queued one runs now (or is about to), and is still a turn ahead.
  assert.equal((await postJson(`${url}/bot/cancel`, {})).status, 202);
  await collectSSE(running);
  assertRefused(await postJson(`${url}/bot/chat`, { message: 'no' }), 409, 'agent_busy');
  steps.release();
  assert.equal((await collectSSE(queued)).text, WORDS.join(''));
  const after = await postJson(`${url}/bot/chat`, { message: 'third' });
  assert.equal(after.status, 200, 'an idle agent takes the turn');
  const stored = await storage.load('bot');
  assert.deepEqual(stored?.messages.map((m) => m.content), ['second', WORDS.join(''), 'third', WORDS.join('')]);
});

test('?when_busy=reject on a router that enqueues; a bad value is 400 naming the choices', async (t) => {
  const steps = new Steps();
  const { url } = await serveWords(t, WORDS, {}, steps);
  const running = await streamChat(`${url}/bot/chat`, 'first');
  assertRefused(await postJson(`${url}/bot/chat?when_busy=reject`, { message: 'no' }), 409, 'agent_busy');
  const bad = await postJson(`${url}/bot/chat?when_busy=later`, { message: 'no' });
  assert.equal(bad.status, 400);
  assert.equal(bad.body.code, 'bad_query');
  assert.match(bad.body.error, /when_busy must be enqueue, reject or interrupt/);
  const queued = postJson(`${url}/bot/chat`, { message: 'second' });
  steps.release();
  assert.equal((await collectSSE(running)).text, WORDS.join(''));
  assert.equal((await queued).status, 200, 'the default (enqueue) waited its turn');
  assert.throws(() => new AgentRouter(new AgentRegistry(), { whenBusy: 'later' as 'reject' }), /whenBusy must be 'enqueue', 'reject' or 'interrupt', got "later"/);
});

test('whenBusy interrupt: the running turn ends cancelled and stores nothing, a waiting one is cancelled too, and the new turn commits', async (t) => {
  const steps = new Steps();
  const { url, storage } = await serveWords(t, WORDS, {}, steps);
  const running = await streamChat(`${url}/bot/chat`, 'first', { query: '?stream=events' });
  const events = eventsOf(running);
  steps.release(1);
  assert.deepEqual((await take(events, 2)).map((e) => e.event), ['turn.started', 'text.delta'], 'the first turn is under way');
  const waiting = await streamChat(`${url}/bot/chat`, 'waiting');
  const interrupting = postJson(`${url}/bot/chat?when_busy=interrupt`, { message: 'second' });
  const rest = await take(events, Infinity);
  const last = rest.at(-1);
  assert.equal(last?.event, 'turn.failed');
  assert.equal(JSON.parse(last?.data ?? '{}').code, 'cancelled');
  const waited = await collectSSE(waiting);
  assert.deepEqual(waited.events.map((e) => e.event), ['error']);
  assert.equal(JSON.parse((waited.events[0] as { data: string }).data).code, 'cancelled');
  steps.release();
  const second = await interrupting;
  assert.equal(second.status, 200);
  assert.equal(second.body.response, 'one two three');
  const stored = await storage.load('bot');
  assert.deepEqual(stored?.messages.map((m) => m.content), ['second', WORDS.join('')], 'the interrupted turns left no trace');
  const idle = await postJson(`${url}/bot/chat?when_busy=interrupt`, { message: 'third' });
  assert.equal(idle.status, 200, 'interrupt on an idle agent just runs');
});

test('maxQueue: past it 429 queue_full with Retry-After; ?when_busy=interrupt still gets in; maxQueue 0 refuses any wait', async (t) => {
  const steps = new Steps();
  const { url } = await serveWords(t, WORDS, { maxQueue: 1 }, steps);
  const running = await streamChat(`${url}/bot/chat`, 'first');
  const queued = await streamChat(`${url}/bot/chat`, 'second');
  assertRefused(await postJson(`${url}/bot/chat`, { message: 'no' }), 429, 'queue_full');
  assertRefused(await postJson(`${url}/bot/invoke`, { method: 'anything' }), 429, 'queue_full');
  assertRefused(await postJson(`${url}/bot/chat?when_busy=reject`, { message: 'no' }), 409, 'agent_busy');
  assert.equal((await postJson(`${url}/bot/cancel`, { turn_id: queued.headers.get('turn-id') })).status, 202);
  await collectSSE(queued);
  const waits = await streamChat(`${url}/bot/chat`, 'third');
  assert.equal(waits.status, 200, 'a freed place in the queue is taken');
  steps.release();
  assert.equal((await collectSSE(running)).text, WORDS.join(''));
  assert.equal((await collectSSE(waits)).text, WORDS.join(''));

  const zeroSteps = new Steps();
  const zero = await serveWords(t, WORDS, { maxQueue: 0 }, zeroSteps);
  const held = await streamChat(`${zero.url}/bot/chat`, 'first');
  assertRefused(await postJson(`${zero.url}/bot/chat`, { message: 'no' }), 429, 'queue_full');
  const interrupting = postJson(`${zero.url}/bot/chat?when_busy=interrupt`, { message: 'second' });
  const cut = (await collectSSE(held)).events.at(-1);
  assert.deepEqual([cut?.event, JSON.parse(cut?.data ?? '{}').code], ['error', 'cancelled']);
  zeroSteps.release();
  assert.equal((await interrupting).status, 200);
});

test('AgentServer: when_busy and max_queue from a config file; a bad when_busy names the key', async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), 'busy-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'config.json');
  await writeFile(file, '{"when_busy": "reject", "max_queue": 3}');
  const { server: config } = await readConfigFile(file);
  assert.deepEqual(config, { whenBusy: 'reject', maxQueue: 3 });
  const steps = new Steps();
  const model = scriptedModel(() =>
    (async function* () {
      for (let i = 0; i < WORDS.length; i++) {
        await steps.wait(i);
        yield WORDS[i] as string;
      }
    })(),
  );
  const registry = new AgentRegistry();
  registry.register('.*', class extends Agent {
    constructor(id: string) {
      super(id, { model });
    }
  });
  const server = new AgentServer(registry, { logger: { error: () => {} }, ...config });
  await server.serve(0);
  t.after(() => server.close());
  const url = `${server.url as string}/agent`;
  const running = await streamChat(`${url}/bot/chat`, 'first');
  assertRefused(await postJson(`${url}/bot/chat`, { message: 'no' }), 409, 'agent_busy');
  const queued = postJson(`${url}/bot/chat?when_busy=enqueue`, { message: 'second' });
  steps.release();
  assert.equal((await collectSSE(running)).text, WORDS.join(''));
  assert.equal((await queued).status, 200);
  await writeFile(file, '{"when_busy": "sometimes"}');
  await assert.rejects(readConfigFile(file), { name: 'TypeError', message: /when_busy must be 'enqueue', 'reject' or 'interrupt', got "sometimes"/ });
});

test('OpenAPI: chat, invoke and the generic route take when_busy (and, with approvals, on_disconnect) and document 409 agent_busy with Retry-After; 429 queue_full on one agent only under a finite maxQueue', async () => {
  type Op = { parameters?: Array<{ name: string; schema?: { enum?: string[] } }>; responses: Record<string, { description: string; headers?: Record<string, unknown> }> };
  const doc = new AgentRouter(new AgentRegistry()).openapi();
  for (const path of ['/{agent_id}/chat', '/{agent_id}/invoke', '/{agent_id}']) {
    const op = doc.paths[path]?.['post'] as Op;
    assert.deepEqual(op.parameters?.find((p) => p.name === 'when_busy')?.schema?.enum, ['enqueue', 'reject', 'interrupt'], path);
    assert.match(op.responses['409']?.description ?? '', /agent_busy/);
    assert.ok(op.responses['409']?.headers?.['Retry-After'] !== undefined);
    assert.match(op.responses['429']?.description ?? '', /maxAgents.*queue_full/s);
  }
  // on_disconnect on every route that starts a turn, approvals included.
  for (const path of ['/{agent_id}/chat', '/{agent_id}/invoke', '/{agent_id}', '/{agent_id}/approvals']) {
    const op = doc.paths[path]?.['post'] as Op;
    assert.deepEqual(op.parameters?.find((p) => p.name === 'on_disconnect')?.schema?.enum, ['cancel', 'continue'], path);
  }
  const state = doc.paths['/{agent_id}/state']?.['get'] as Op;
  assert.equal(state.parameters?.some((p) => p.name === 'when_busy' || p.name === 'on_disconnect'), false);
  const single = (options = {}) => new AgentRouter(new Agent('bot', { model: echoModel() }), options).openapi();
  assert.equal((single().paths['/chat']?.['post'] as Op).responses['429'], undefined);
  const capped = single({ maxQueue: 2 });
  assert.match((capped.paths['/chat']?.['post'] as Op).responses['429']?.description ?? '', /queue_full/);
  assert.equal((capped.paths['/state']?.['get'] as Op).responses['429'], undefined);
  const validator = new Validator();
  const result = await validator.validate(capped as unknown as Record<string, unknown>);
  assert.equal(result.valid, true, JSON.stringify(result.errors));
});
