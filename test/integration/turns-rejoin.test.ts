import assert from 'node:assert/strict';
import { test } from 'node:test';
import { replayStore } from '../../src/router/router.ts';
import { getJson, streamChat } from '../helpers/http.ts';
import { collectSSE } from '../helpers/sse.ts';
import { eventsOf, rejoinUrl, rest, serveWords, Steps, take } from '../helpers/turns-serve.ts';

const WORDS = ['one', ' two', ' three\r', '\nfour'];

for (const mode of ['plain', 'typed'] as const) {
  const query = mode === 'typed' ? '?stream=events' : '?stream=true';
  test(`rejoin (${mode}): after each event of a live turn in turn, exactly the events after it, in order`, async (t) => {
    const total = WORDS.length + (mode === 'typed' ? 2 : 1);
    for (let k = 0; k <= total; k++) {
      const steps = new Steps();
      const { url } = await serveWords(t, WORDS, {}, steps);
      const first = await streamChat(`${url}/bot/chat`, 'go', { query });
      const turnId = first.headers.get('turn-id') as string;
      const events = eventsOf(first);
      // Event i is chunk i in the plain stream, chunk i - 1 in the typed one (turn.started is 1).
      steps.release(k >= total - 1 ? Infinity : Math.max(0, mode === 'typed' ? k - 1 : k));
      const seen = await take(events, Math.min(k, total));
      const headers: Record<string, string> = k === 0 ? {} : { 'last-event-id': (seen.at(-1) as { id: string }).id };
      const rejoined = await fetch(rejoinUrl(url, 'bot', turnId, mode === 'typed' ? '?stream=events' : ''), { headers });
      assert.equal(rejoined.headers.get('turn-id'), turnId);
      steps.release();
      const missing = await rest(events);
      assert.equal(seen.length + missing.length, total);
      if (k === total) {
        // The client has the ended turn whole: 204, which tells an EventSource not to reconnect.
        assert.deepEqual([rejoined.status, await rejoined.text()], [204, '']);
        continue;
      }
      assert.equal(rejoined.status, 200);
      assert.deepEqual(await rest(eventsOf(rejoined)), [...seen.slice(k), ...missing], `after ${k} events`);
    }
  });
}

test('rejoin: two clients follow one turn, and a rejoin after the end replays it in full; last_event_id works as a query', async (t) => {
  const steps = new Steps();
  const { url } = await serveWords(t, WORDS, {}, steps);
  const first = await streamChat(`${url}/bot/chat`, 'go', { query: '?stream=events' });
  const turnId = first.headers.get('turn-id') as string;
  const second = await fetch(rejoinUrl(url, 'bot', turnId, '?stream=events'));
  steps.release();
  const [a, b] = await Promise.all([collectSSE(first), collectSSE(second)]);
  assert.deepEqual(b.events, a.events);
  assert.equal(a.events.length, WORDS.length + 2);
  const after = await collectSSE(await fetch(rejoinUrl(url, 'bot', turnId, '?stream=events')));
  assert.deepEqual(after.events, a.events);
  const plain = await collectSSE(await fetch(rejoinUrl(url, 'bot', turnId, `?last_event_id=${turnId}:2`)));
  assert.deepEqual(plain.events.map((e) => [e.event, e.data, e.id]), [
    ['message', ' three\n', `${turnId}:3`],
    ['message', 'four', `${turnId}:4`],
    ['done', '[DONE]', `${turnId}:5`],
  ]);
  // Nothing after the last event, and nothing will come: 204. An id past the end was never sent: 400.
  for (const [query, seq, status] of [['', 5, 204], ['?stream=events', 6, 204], ['', 6, 400], ['?stream=events', 7, 400]] as const) {
    const res = await fetch(rejoinUrl(url, 'bot', turnId, query), { headers: { 'last-event-id': `${turnId}:${seq}` } });
    const body = await res.text();
    assert.deepEqual([res.status, status === 204 ? body : (JSON.parse(body) as { code: string }).code], [status, status === 204 ? '' : 'bad_last_event_id'], `${query} after ${seq}`);
  }
});

test('rejoin: 404 turn_not_found for an unknown id, another agent\'s turn, and after replayTTL; memory back to none', async (t) => {
  const clock = { now: 1_000_000 };
  const { url, router } = await serveWords(t, ['hi'], { now: () => clock.now, replayTTL: 60 });
  const res = await streamChat(`${url}/bot/chat`, 'go');
  const turnId = res.headers.get('turn-id') as string;
  await res.text();
  assert.equal((await getJson(rejoinUrl(url, 'nobody', 'x'))).body.code, 'turn_not_found');
  const other = await getJson(rejoinUrl(url, 'other', turnId));
  assert.deepEqual([other.status, other.body.code], [404, 'turn_not_found']);
  clock.now += 59_000;
  assert.equal((await fetch(rejoinUrl(url, 'bot', turnId))).status, 200);
  assert.equal(router[replayStore].size, 1);
  clock.now += 1_000;
  const gone = await getJson(rejoinUrl(url, 'bot', turnId));
  assert.deepEqual([gone.status, gone.body.code], [404, 'turn_not_found']);
  assert.equal(router[replayStore].size, 0);
});

test('rejoin: replayLimit keeps the newest events; a rejoin that needs dropped ones gets 410 replay_expired', async (t) => {
  const { url } = await serveWords(t, ['aaaaa', 'bbbbb', 'ccccc', 'ddddd'], { replayLimit: 10 });
  const res = await streamChat(`${url}/bot/chat`, 'go');
  const turnId = res.headers.get('turn-id') as string;
  await res.text();
  const expired = await getJson(rejoinUrl(url, 'bot', turnId));
  assert.deepEqual([expired.status, expired.body.code], [410, 'replay_expired']);
  const kept = await collectSSE(await fetch(rejoinUrl(url, 'bot', turnId), { headers: { 'last-event-id': `${turnId}:2` } }));
  assert.deepEqual(kept.events.map((e) => e.data), ['ccccc', 'ddddd', '[DONE]']);
  const bad = await getJson(rejoinUrl(url, 'bot', turnId), { 'last-event-id': 'someone-else:2' });
  assert.deepEqual([bad.status, bad.body.code], [400, 'bad_last_event_id']);
});

test('rejoin: authorize is asked with the action read', async (t) => {
  const asked: string[] = [];
  const { url } = await serveWords(t, ['hi'], { authorize: (_req, { action }) => (asked.push(action), true) });
  const res = await streamChat(`${url}/bot/chat`, 'go');
  const turnId = res.headers.get('turn-id') as string;
  await res.text();
  await (await fetch(rejoinUrl(url, 'bot', turnId))).text();
  assert.deepEqual(asked, ['chat', 'read']);
});

for (const mode of ['plain', 'typed'] as const) {
  const query = mode === 'typed' ? '?stream=events' : '?stream=true';
  test(`onDisconnect continue (${mode}): cut the stream after each event in turn, rejoin, get exactly the missing events; the turn commits`, async (t) => {
    const total = WORDS.length + (mode === 'typed' ? 2 : 1);
    for (let k = 0; k < total; k++) {
      const steps = new Steps();
      const perRequest = k % 2 === 1;
      const { url, storage } = await serveWords(t, WORDS, perRequest ? {} : { onDisconnect: 'continue' }, steps);
      const controller = new AbortController();
      const first = await streamChat(`${url}/bot/chat`, 'go', { query: perRequest ? `${query}&on_disconnect=continue` : query, signal: controller.signal });
      const turnId = first.headers.get('turn-id') as string;
      steps.release(Math.max(0, mode === 'typed' ? k - 1 : k));
      const seen = await take(eventsOf(first), k);
      controller.abort();
      await new Promise((resolve) => setTimeout(resolve, 20));
      steps.release();
      const headers: Record<string, string> = k === 0 ? {} : { 'last-event-id': (seen.at(-1) as { id: string }).id };
      const rejoined = await collectSSE(await fetch(rejoinUrl(url, 'bot', turnId, mode === 'typed' ? '?stream=events' : ''), { headers }));
      const all = await collectSSE(await fetch(rejoinUrl(url, 'bot', turnId, mode === 'typed' ? '?stream=events' : '')));
      assert.equal(all.events.length, total, `after ${k}: the whole turn`);
      assert.deepEqual(rejoined.events, all.events.slice(k), `after ${k}`);
      assert.equal(all.events.at(-1)?.event, mode === 'typed' ? 'turn.finished' : 'done');
      const stored = await storage.load('bot');
      assert.equal(stored?.messages.at(-1)?.content, WORDS.join(''), 'committed');
    }
  });
}

test('onDisconnect cancel (the default): a cut turn ends, stores nothing, and a rejoin sees it fail; a bad on_disconnect is 400', async (t) => {
  const steps = new Steps();
  const { url, storage } = await serveWords(t, WORDS, {}, steps);
  const controller = new AbortController();
  const first = await streamChat(`${url}/bot/chat`, 'go', { signal: controller.signal });
  const turnId = first.headers.get('turn-id') as string;
  steps.release(1);
  await take(eventsOf(first), 1);
  controller.abort();
  await new Promise((resolve) => setTimeout(resolve, 20));
  const after = await collectSSE(await fetch(rejoinUrl(url, 'bot', turnId)));
  assert.equal(after.events.at(-1)?.event, 'error');
  assert.equal((await storage.load('bot'))?.messages.length ?? 0, 0);
  const bad = await fetch(`${url}/bot/chat?on_disconnect=maybe`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"message":"x"}' });
  assert.equal(bad.status, 400);
});

test('rejoin: a Last-Event-ID past what a live turn of this process has sent is 400 bad_last_event_id', async (t) => {
  const steps = new Steps();
  const { url } = await serveWords(t, WORDS, {}, steps);
  const live = await streamChat(`${url}/bot/chat`, 'go', { query: '?stream=events' });
  const turnId = live.headers.get('turn-id') as string;
  const events = eventsOf(live);
  steps.release(1);
  assert.deepEqual((await take(events, 2)).map((event) => event.id), [`${turnId}:1`, `${turnId}:2`]);
  for (const [query, seq, status] of [['?stream=events', 2, 200], ['?stream=events', 3, 400], ['', 1, 200], ['', 2, 400]] as const) {
    const res = await fetch(rejoinUrl(url, 'bot', turnId, query), { headers: { 'last-event-id': `${turnId}:${seq}` } });
    assert.equal(res.status, status, `${query} after ${seq}`);
    if (status === 400) assert.equal(((await res.json()) as { code: string }).code, 'bad_last_event_id');
    else await res.body?.cancel();
  }
  steps.release();
  assert.equal((await rest(events)).at(-1)?.event, 'turn.finished');
});
