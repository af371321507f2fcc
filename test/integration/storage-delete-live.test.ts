/**
 * A record deleted while an Agent instance still holds it, then made again by
 * another instance of the same id (another router or process on the same
 * storage): the holder's next turn must start from the new record, whether
 * that record has reached the version the holder knew (it took as many
 * commits) or gone past it. Before record-version.ts, a record made again
 * started at 1 again: on the same version the holder committed over its
 * deleted state, and past it the holder read a tail by its old message count,
 * keeping the deleted messages and losing the new record's first ones. Run
 * against every backend, as the storage contract is.
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { scriptedModel } from '../../src/models/scripted.ts';
import type { Storage } from '../../src/storage/storage.ts';
import { allBackends } from '../helpers/storage-backends.ts';

class Notebook extends Agent<{ notes: string[] }> {
  static override actions = ['note'];
  /** `prompts` gets what the model was shown, each turn. */
  constructor(id: string, storage: Storage, prompts: string[][]) {
    super(id, {
      storage,
      initialState: { notes: [] },
      model: scriptedModel(({ messages }) => {
        prompts.push(messages.map((message) => message.content));
        return `re: ${messages.at(-1)?.content ?? ''}`;
      }),
    });
  }
  async note(text: string): Promise<string[]> {
    await this.setState((state) => ({ notes: [...state.notes, text] }));
    return this.state.notes;
  }
}

/** A turn of history and one of state: two commits. */
async function turn(agent: Notebook, text: string): Promise<void> {
  assert.equal(await agent.chat(text), `re: ${text}`);
  await agent.invoke('note', [text]);
}

const exchange = (text: string): string[] => [text, `re: ${text}`];

for (const backend of allBackends()) {
  describe(`a record deleted under a live Agent, made again by another instance: ${backend.name}`, () => {
    after(() => backend.cleanup());

    for (const [label, turnsOfB] of [['as many turns as A had', 3], ['more turns than A had', 5]] as const) {
      test(`B takes ${label}: A's next turn holds only B's turns and its own, nothing deleted, nothing of B's lost`, async () => {
        // One MemoryStorage for memory; for the others, each instance has its own handle, as another process would.
        const [storageA, storageB] = [await backend.open(), await backend.open()];
        const id = `deleted-under-a-${turnsOfB}`;
        const prompts: string[][] = [];
        const a = new Notebook(id, storageA, prompts);
        const b = new Notebook(id, storageB, prompts);
        for (let i = 0; i < 3; i++) await turn(a, `deleted ${i}`);
        assert.ok(storageA.delete, `${backend.name} has delete()`);
        await storageA.delete(id);
        const ofB = Array.from({ length: turnsOfB }, (_, i) => `b ${i}`);
        for (const text of ofB) await turn(b, text);
        prompts.length = 0;
        await turn(a, 'a again');

        const notes = [...ofB, 'a again'];
        const history = notes.flatMap(exchange);
        const stored = await storageA.load(id);
        assert.deepEqual(a.messages.map((message) => message.content), history, "A's history");
        assert.deepEqual(stored?.messages.map((message) => message.content), history, 'the stored history');
        assert.deepEqual(a.state, { notes }, "A's state");
        assert.deepEqual(stored?.state, { notes }, 'the stored state');
        assert.equal(stored?.version, a.version);
        assert.deepEqual(prompts, [[...ofB.flatMap(exchange), 'a again']], 'the model saw the new record only');
        assert.doesNotMatch(JSON.stringify([a.messages, a.state, stored]), /deleted/);
        // B reads A's turn on top of its own.
        assert.deepEqual(await b.snapshot(), { notes });
        assert.deepEqual(b.messages.map((message) => message.content), history, "B's history");
      });
    }
  });
}
