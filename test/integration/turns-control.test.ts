import assert from 'node:assert/strict';
import { test } from 'node:test';
import { postJson, streamChat } from '../helpers/http.ts';
import { collectSSE } from '../helpers/sse.ts';
import { serveWords, Steps } from '../helpers/turns-serve.ts';

const WORDS = ['one', ' two', ' three'];

test('cancel: the running turn (no turn_id) ends its stream with cancelled, stores nothing, and the next turn starts at once', async (t) => {
  const steps = new Steps();
  const asked: string[] = [];
  const { url, storage } = await serveWords(t, WORDS, { authorize: (_req, { action }) => (asked.push(action), true) }, steps);
  const running = await streamChat(`${url}/bot/chat`, 'go', { query: '?stream=events' });
  const turnId = running.headers.get('turn-id');
  const queued = postJson(`${url}/bot/chat`, { message: 'next' });
  const cancelled = await postJson(`${url}/bot/cancel`, {});
  assert.equal(cancelled.status, 202);
  assert.deepEqual(cancelled.body, { agent_id: 'bot', turn_id: turnId, cancelled: true });
  const { events } = await collectSSE(running);
  const last = events.at(-1) as { event: string; data: string };
  assert.equal(last.event, 'turn.failed');
  assert.equal(JSON.parse(last.data).code, 'cancelled');
  steps.release();
  const next = await queued;
  assert.equal(next.status, 200);
  assert.equal(next.body.response, WORDS.join(''));
  const stored = await storage.load('bot');
  assert.deepEqual(stored?.messages.map((m) => m.content), ['next', WORDS.join('')], 'the cancelled turn left no trace');
  assert.ok(asked.includes('cancel'));
});

test('cancel: a queued turn by its turn_id; 404 no_running_turn for an idle agent or an unknown id', async (t) => {
  const steps = new Steps();
  const { url } = await serveWords(t, WORDS, {}, steps);
  const running = streamChat(`${url}/bot/chat`, 'first');
  const queued = await streamChat(`${url}/bot/chat`, 'second');
  const queuedId = queued.headers.get('turn-id');
  const unknown = await postJson(`${url}/bot/cancel`, { turn_id: 'nope' });
  assert.deepEqual([unknown.status, unknown.body.code], [404, 'no_running_turn']);
  const cancelled = await postJson(`${url}/bot/cancel`, { turn_id: queuedId });
  assert.deepEqual(cancelled.body, { agent_id: 'bot', turn_id: queuedId, cancelled: true });
  const { events } = await collectSSE(queued);
  assert.deepEqual(events.map((e) => e.event), ['error']);
  assert.equal(JSON.parse((events[0] as { data: string }).data).code, 'cancelled');
  steps.release();
  assert.equal((await collectSSE(await running)).text, WORDS.join(''), 'the running turn is untouched');
  const idle = await postJson(`${url}/bot/cancel`, {});
  assert.deepEqual([idle.status, idle.body.code], [404, 'no_running_turn']);
});
