import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { test } from 'node:test';
import { TurnCancel } from '../../src/lib/cancel.ts';
import { Mailbox } from '../../src/lib/mailbox.ts';

test('TurnCancel: hooks run once on abort; a signal asked for before or after aborts with the reason', () => {
  const early = new TurnCancel();
  const before = early.signal;
  const calls: string[] = [];
  early.onAbort(() => calls.push('kept'));
  const stopped = (): void => void calls.push('stopped');
  early.onAbort(stopped);
  early.offAbort(stopped);
  assert.equal(before.aborted, false);
  const reason = new Error('cut');
  early.abort(reason);
  early.abort(new Error('second abort is ignored'));
  assert.deepEqual(calls, ['kept']);
  assert.equal(early.aborted, true);
  assert.equal(early.reason, reason);
  assert.equal(before.aborted, true);
  assert.equal(before.reason, reason);
  assert.throws(() => early.throwIfAborted(), /cut/);

  const late = new TurnCancel();
  late.abort(reason);
  assert.equal(late.signal.aborted, true, 'a signal made after the abort is born aborted');
  assert.equal(late.signal.reason, reason);
  assert.equal(late.signal, late.signal, 'one signal per cancel');
});

test('TurnCancel: the first hook, later ones and a first one taken off all behave alike', () => {
  const cancel = new TurnCancel();
  const calls: string[] = [];
  const first = (): void => void calls.push('first');
  cancel.onAbort(first);
  cancel.onAbort(() => calls.push('second'));
  cancel.offAbort(first);
  cancel.onAbort(() => calls.push('third'));
  cancel.offAbort(() => calls.push('never added'));
  cancel.abort(new Error('cut'));
  assert.deepEqual(calls, ['second', 'third']);
});

test('TurnCancel following a caller signal: its signal follows the caller\'s abort and its own; it never aborts the caller\'s', () => {
  const controller = new AbortController();
  const cancel = new TurnCancel(controller.signal);
  const signal = cancel.signal;
  assert.equal(cancel.signal, signal, 'one signal per cancel');
  const calls: number[] = [];
  cancel.onAbort(() => calls.push(1));
  const stopped = (): void => void calls.push(2);
  cancel.onAbort(stopped);
  cancel.offAbort(stopped);
  cancel.onAbort(() => calls.push(3));
  controller.abort(new Error('caller'));
  assert.deepEqual(calls, [1, 3]);
  assert.equal(cancel.aborted, true);
  assert.match(String(cancel.reason), /caller/);
  assert.equal(signal.aborted, true);
  assert.match(String(signal.reason), /caller/);

  const other = new AbortController();
  const own = new TurnCancel(other.signal);
  const handedOut = own.signal;
  own.abort(new Error('turn ended'));
  assert.equal(own.aborted, true);
  assert.equal(handedOut.aborted, true, 'a model holding it stops when the turn does');
  assert.match(String(handedOut.reason), /turn ended/);
  assert.equal(other.signal.aborted, false, "the caller's signal is theirs");
  assert.equal(getEventListeners(other.signal, 'abort').length, 0, 'and gets no listener for it');
});

test('Mailbox: a waiter aborted in the middle of the queue gives up its place; the rest keep their order', async () => {
  const mailbox = new Mailbox();
  assert.equal(mailbox.tryAcquire(), true);
  assert.equal(mailbox.tryAcquire(), false, 'held');
  const order: string[] = [];
  const cancel = new TurnCancel();
  const second = mailbox.acquire().then(() => order.push('second'));
  const skipped = mailbox.acquire(cancel).then(() => order.push('skipped'), (error: Error) => order.push(`rejected: ${error.message}`));
  const third = mailbox.acquire().then(() => order.push('third'));
  assert.equal(mailbox.size, 4);
  cancel.abort(new Error('gone'));
  await skipped;
  assert.equal(mailbox.size, 3);
  mailbox.release();
  await second;
  assert.equal(mailbox.tryAcquire(), false, 'handed over to the second, not freed');
  mailbox.release();
  await third;
  mailbox.release();
  assert.deepEqual(order, ['rejected: gone', 'second', 'third']);
  assert.equal(mailbox.size, 0);
  mailbox.release(); // a release of a free mailbox does nothing
  assert.equal(mailbox.size, 0);
  assert.equal(mailbox.tryAcquire(), true, 'free again');
  await assert.rejects(new Mailbox().acquire(cancel), /gone/, 'an aborted cancel does not even queue');
});
