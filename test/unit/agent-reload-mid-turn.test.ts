/**
 * A turn whose agent reloaded its history while the turn ran (another writer
 * committed, and a state read caught up with it) takes back only its own
 * message when it fails: the other writer's turn stays, here and in storage.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { echoModel } from '../../src/models/echo.ts';
import type { Model } from '../../src/models/model.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import type { Storage } from '../../src/storage/storage.ts';
import { deferred } from '../helpers/http.ts';

/** A storage shared by two instances that takes no lock (as a user's own may not): the other's turn runs while one's is paused. */
function locklessStorage(): Storage {
  const memory = new MemoryStorage();
  return {
    load: (id) => memory.load(id),
    loadSince: (id, known) => memory.loadSince(id, known),
    commit: (id, turn) => memory.commit(id, turn),
    head: (id) => memory.head(id),
  };
}

/** A model that says "partial", waits for `release`, then fails (or, `fail` false, ends its reply). */
function pausedModel(fail = true): { model: Model; started: Promise<void>; release: () => void } {
  const started = deferred();
  const gate = deferred();
  return {
    started: started.promise,
    release: () => gate.resolve(),
    model: {
      name: 'paused',
      async *stream() {
        started.resolve();
        yield 'partial';
        await gate.promise;
        if (fail) throw new Error('the model failed');
      },
    },
  };
}

const contents = (messages: readonly { content: string }[]): string[] => messages.map((message) => message.content);

for (const [how, run] of [
  ['chat()', (agent: Agent, message: string) => agent.chat(message)],
  ['stream()', async (agent: Agent, message: string) => {
    for await (const _ of agent.stream(message)) { /* read to the end */ }
  }],
] as const) {
  test(`${how}: a turn that fails after its history was reloaded mid-turn takes back only its own message`, async () => {
    const storage = locklessStorage();
    const mine = new Agent('shared', { storage, model: echoModel() });
    const other = new Agent('shared', { storage, model: echoModel() });
    await other.chat('before');
    await mine.load();

    const again = pausedModel();
    mine.model = again.model;
    const failing = run(mine, 'mine');
    await again.started;
    await other.chat('meanwhile');
    // A state read catches up with storage while the turn runs: the history is reloaded under it.
    await mine.snapshot();
    again.release();
    await assert.rejects(failing, /the model failed/);

    const stored = await storage.load('shared');
    assert.deepEqual(contents(stored?.messages ?? []), ['before', 'before', 'meanwhile', 'meanwhile']);
    assert.deepEqual(contents(mine.messages), contents(stored?.messages ?? []), 'the other writer\'s turn is kept, and only "mine" is gone');
    assert.equal(mine.version, stored?.version);

    // The next turn builds on the whole history.
    mine.model = echoModel();
    assert.equal(await mine.chat('next'), 'next');
    assert.deepEqual(contents((await storage.load('shared'))?.messages ?? []), ['before', 'before', 'meanwhile', 'meanwhile', 'next', 'next']);
    assert.deepEqual(contents(mine.messages), ['before', 'before', 'meanwhile', 'meanwhile', 'next', 'next']);
  });
}

test('a turn that completes after its history was reloaded mid-turn is refused as a version conflict, not stored over the other writer', async () => {
  const storage = locklessStorage();
  const mine = new Agent('shared-ok', { storage, model: echoModel() });
  const other = new Agent('shared-ok', { storage, model: echoModel() });
  await other.chat('before');
  await mine.load();

  const paused = pausedModel(false);
  mine.model = paused.model;
  const replying = mine.chat('mine');
  await paused.started;
  await other.chat('meanwhile');
  await mine.snapshot();
  paused.release();
  // Its model never saw "meanwhile": stored after it, the history would read as if it had.
  await assert.rejects(replying, { code: 'version_conflict' });
  assert.deepEqual(contents((await storage.load('shared-ok'))?.messages ?? []), ['before', 'before', 'meanwhile', 'meanwhile']);

  mine.model = echoModel();
  assert.equal(await mine.chat('next'), 'next');
  assert.deepEqual(contents(mine.messages), ['before', 'before', 'meanwhile', 'meanwhile', 'next', 'next']);
});
