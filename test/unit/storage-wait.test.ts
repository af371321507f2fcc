/** The storage backends' waiting helpers: abortable delay, poll backoff, per-key mutex. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { backoff, delay, KeyedMutex } from '../../src/storage/wait.ts';

test('delay rejects with the abort reason, before or while waiting', async () => {
  await assert.rejects(delay(10_000, AbortSignal.abort(new Error('before'))), /before/);
  const controller = new AbortController();
  const waiting = delay(10_000, controller.signal);
  controller.abort(new Error('during'));
  await assert.rejects(waiting, /during/);
  await delay(0);
});

test('backoff grows from ~1 ms to its cap, with jitter never above the cap', () => {
  for (let attempt = 0; attempt < 40; attempt++) {
    const ms = backoff(attempt, 50);
    assert.ok(ms > 0 && ms <= 50, `attempt ${attempt}: ${ms}`);
  }
  assert.ok(backoff(0) <= 2);
  assert.ok(backoff(30) >= 25);
});

test('KeyedMutex: one holder per key in arrival order, keys independent, an aborted waiter leaves the queue', async () => {
  const mutex = new KeyedMutex();
  const events: string[] = [];
  const first = await mutex.acquire('a');
  const other = await mutex.acquire('b'); // another key is not blocked
  other();
  const controller = new AbortController();
  const aborted = mutex.acquire('a', controller.signal);
  const second = mutex.run('a', async () => {
    events.push('second runs');
  });
  controller.abort(new Error('left'));
  await assert.rejects(aborted, /left/);
  await assert.rejects(mutex.acquire('a', AbortSignal.abort(new Error('pre'))), /pre/);
  events.push('first releases');
  first();
  first(); // idempotent
  await second;
  assert.deepEqual(events, ['first releases', 'second runs']);
  (await mutex.acquire('a'))(); // free again
});
