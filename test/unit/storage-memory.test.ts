import assert from 'node:assert/strict';
import { test } from 'node:test';
import { VersionConflictError } from '../../src/errors.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';

test('MemoryStorage.sync: head and commit agree with the async methods; a stale commit throws at once', async () => {
  const storage = new MemoryStorage();
  const sync = storage.sync;
  assert.equal(sync.head('m'), 0);
  const first = sync.commit('m', { expectedVersion: 0, state: { n: 1 }, append: [{ role: 'user', content: 'a' }] });
  assert.ok(Number.isSafeInteger(first) && first > 0);
  assert.equal(sync.head('m'), first);
  assert.equal(await storage.commit('m', { expectedVersion: first, state: { n: 2 }, append: [] }), first + 1);
  assert.equal(sync.head('m'), first + 1);
  assert.equal(await storage.head('m'), first + 1);
  assert.throws(() => sync.commit('m', { expectedVersion: first, state: {}, append: [] }), VersionConflictError);
  assert.deepEqual(await storage.load('m'), { state: { n: 2 }, messages: [{ role: 'user', content: 'a' }], version: first + 1 });
});

test('MemoryStorage locks: waiters queue behind a lone holder in order, an aborted one gives up its place', async () => {
  const storage = new MemoryStorage();
  const release = storage.sync.tryLock('q');
  assert.ok(release);
  const order: string[] = [];
  const gone = new AbortController();
  const first = storage.lock('q').then((unlock) => (order.push('first'), unlock));
  const skipped = storage.lock('q', gone.signal).then(() => order.push('skipped'), () => order.push('aborted'));
  const third = storage.lock('q').then((unlock) => (order.push('third'), unlock));
  gone.abort(new Error('gone'));
  await skipped;
  release();
  release(); // a second release does nothing
  await (await first)();
  assert.equal(storage.sync.tryLock('q'), undefined, 'handed to the third');
  await (await third)();
  assert.deepEqual(order, ['aborted', 'first', 'third']);
  const again = storage.sync.tryLock('q');
  assert.ok(again, 'free once everyone released');
  again();
});

test('MemoryStorage.sync.tryLock and lock() exclude each other, in arrival order', async () => {
  const storage = new MemoryStorage();
  const release = storage.sync.tryLock('l');
  assert.ok(release);
  assert.equal(storage.sync.tryLock('l'), undefined, 'held');
  assert.ok(storage.sync.tryLock('other'), 'ids lock apart');
  const order: string[] = [];
  const waiting = storage.lock('l').then((unlock) => {
    order.push('lock() got it');
    return unlock;
  });
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(order, [], 'lock() waits for the sync holder');
  release();
  const unlock = await waiting;
  assert.equal(storage.sync.tryLock('l'), undefined, 'now held by lock()');
  await unlock();
  const again = storage.sync.tryLock('l');
  assert.ok(again, 'free once released');
  again();
});

test('MemoryStorage: an id deleted while locked stays locked until released, then starts over; a lock alone stores nothing', async () => {
  const storage = new MemoryStorage();
  const sync = storage.sync;
  const unlockNew = sync.tryLock('new');
  assert.ok(unlockNew);
  unlockNew();
  assert.equal(sync.head('new'), 0);
  assert.equal(await storage.load('new'), undefined, 'locking an id stores no record');

  const first = sync.commit('d', { expectedVersion: 0, state: { n: 1 }, append: [] });
  assert.equal(sync.head('d'), first);
  const release = sync.tryLock('d');
  assert.ok(release);
  await storage.delete('d');
  assert.equal(sync.head('d'), 0, 'deleted');
  assert.equal(sync.tryLock('d'), undefined, 'still held by the turn that had it');
  // The holder commits after the delete: the id starts over from version 0.
  const restarted = sync.commit('d', { expectedVersion: 0, state: { n: 2 }, append: [] });
  assert.notEqual(restarted, first, 'a new record, not the deleted one');
  release();
  assert.deepEqual(await storage.load('d'), { state: { n: 2 }, messages: [], version: restarted });
  const again = sync.tryLock('d');
  assert.ok(again, 'free once released');
  again();

  // Deleted while held, released with nothing stored: the next lock and commit start from nothing.
  const held = sync.tryLock('e');
  assert.ok(held);
  sync.commit('e', { expectedVersion: 0, state: {}, append: [{ role: 'user', content: 'x' }] });
  await storage.delete('e');
  held();
  assert.equal(await storage.load('e'), undefined);
  const next = sync.tryLock('e');
  assert.ok(next);
  next();
});
