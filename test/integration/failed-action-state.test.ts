/**
 * An action that changes its state in place (`this.state.notes.push(x)`,
 * `this.state.tally.count++`) and then fails, or is cut and changes it after
 * the cut. A failed turn leaves storage as it was (DESIGN §4): before, its
 * change stayed in the live instance's state, GET state showed it, and the
 * instance's next successful turn (a chat, another action) stored it. The
 * common pattern of changing in place and then handing the change to
 * setState must still store its change when the action succeeds. Run against
 * every backend, as the storage contract is.
 */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouterError } from '../../src/errors.ts';
import { echoModel } from '../../src/models/echo.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import type { Storage } from '../../src/storage/storage.ts';
import { serveAgents } from '../helpers/agents.ts';
import { deferred, getJson, postJson } from '../helpers/http.ts';
import { allBackends } from '../helpers/storage-backends.ts';

interface Notes {
  notes: string[];
  tally: { count: number };
}

const BEFORE: Notes = { notes: ['kept'], tally: { count: 0 } };

/** What a cut action waits for, then changes in place, then reports: one set per test. */
interface Late {
  gate: ReturnType<typeof deferred<void>>;
  changed: ReturnType<typeof deferred<void>>;
}

function notebookOn(storage: Storage, late?: Late): new (id: string) => Agent<Notes> {
  return class Notebook extends Agent<Notes> {
    static override actions = ['note', 'scribble', 'scribbleAfterSetState', 'scribbleLate'];
    constructor(id: string) {
      super(id, { model: echoModel(), storage, initialState: { notes: [], tally: { count: 0 } } });
    }
    /** The common pattern: changed in place, then handed to setState. */
    async note(text: string): Promise<string[]> {
      this.state.notes.push(text);
      await this.setState({ notes: this.state.notes });
      return this.state.notes;
    }
    async scribble(text: string): Promise<never> {
      this.state.notes.push(text);
      this.state.tally.count++;
      throw new AgentRouterError(422, 'scribble_refused', 'scribble: refused after changing state in place');
    }
    /** setState copies one level deep: the nested object it keeps is the committed state's own. */
    async scribbleAfterSetState(text: string): Promise<never> {
      await this.setState({ notes: [...this.state.notes, text] });
      this.state.tally.count += 10;
      throw new Error('failed after setState and an in-place change');
    }
    async scribbleLate(text: string): Promise<void> {
      await late?.gate.promise;
      this.state.notes.push(text);
      this.state.tally.count = 99;
      late?.changed.resolve();
    }
  };
}

for (const backend of allBackends()) {
  describe(`an action that changes state in place and fails: ${backend.name}`, () => {
    after(() => backend.cleanup());

    test('its change shows neither in GET state nor in storage after the next chat; a later action stores only its own change', async (t) => {
      const storage = await backend.open();
      // Storage as another process reads it (for memory, the same one).
      const reader = await backend.open();
      const url = await serveAgents(t, notebookOn(storage));
      const base = `${url}/failing`;

      assert.deepEqual((await postJson(`${base}/invoke`, { method: 'note', params: ['kept'] })).body.result, ['kept']);
      const refused = await postJson(`${base}/invoke`, { method: 'scribble', params: ['lost'] });
      assert.equal(refused.status, 422);
      assert.equal(refused.body.code, 'scribble_refused');
      assert.deepEqual((await getJson(`${base}/state`)).body.state, BEFORE, 'GET state right after the failed action');

      const envelope = await postJson(base, { action: 'invoke', payload: { method: 'scribbleAfterSetState', params: ['lost too'] } });
      assert.equal(envelope.status, 500);
      assert.deepEqual((await postJson(base, { action: 'state' })).body.state, BEFORE, 'the envelope state after the second failed action');

      assert.equal((await postJson(`${base}/chat`, { message: 'hello' })).status, 200);
      const stored = await reader.load('failing');
      assert.deepEqual(stored?.state, BEFORE, 'stored after the chat that followed');
      assert.deepEqual(stored?.messages.map((message) => message.content), ['hello', 'hello']);
      assert.deepEqual((await getJson(`${base}/state`)).body.state, BEFORE, 'GET state after the chat');

      assert.deepEqual((await postJson(`${base}/invoke`, { method: 'note', params: ['after'] })).body.result, ['kept', 'after']);
      const after = { notes: ['kept', 'after'], tally: { count: 0 } };
      assert.deepEqual((await reader.load('failing'))?.state, after, 'stored after the next action');
      assert.deepEqual((await getJson(`${base}/state`)).body.state, after);
    });

    test('another process writes after the failed action: the next turn holds its change, not the failed one', async () => {
      const [storageA, storageB] = [await backend.open(), await backend.open()];
      const Notebook = notebookOn(storageA);
      const a = new Notebook('shared');
      const b = new (notebookOn(storageB))('shared');
      await a.invoke('note', ['kept']);
      await assert.rejects(a.invoke('scribble', ['lost']), { code: 'scribble_refused' });
      assert.deepEqual(await b.invoke('note', ['from b']), ['kept', 'from b']);
      assert.equal(await a.chat('hello'), 'hello');
      const now = { notes: ['kept', 'from b'], tally: { count: 0 } };
      assert.deepEqual(a.state, now);
      assert.deepEqual((await storageA.load('shared'))?.state, now);
      assert.equal((await storageA.load('shared'))?.version, a.version);
    });

    test('an action cut by turnTimeout that changes state in place after the cut leaves no trace', async (t) => {
      const storage = await backend.open();
      const reader = await backend.open();
      const late: Late = { gate: deferred(), changed: deferred() };
      const url = await serveAgents(t, notebookOn(storage, late), { turnTimeout: 0.05 });
      const base = `${url}/cut`;

      assert.equal((await postJson(`${base}/invoke`, { method: 'note', params: ['kept'] })).status, 200);
      const cut = await postJson(`${base}/invoke`, { method: 'scribbleLate', params: ['late'] });
      assert.equal(cut.status, 504);
      assert.equal(cut.body.code, 'turn_timeout');
      late.gate.resolve();
      await late.changed.promise;

      assert.deepEqual((await getJson(`${base}/state`)).body.state, BEFORE, 'GET state once the cut action changed it');
      assert.equal((await postJson(`${base}/chat`, { message: 'hello' })).status, 200);
      assert.deepEqual((await reader.load('cut'))?.state, BEFORE, 'stored after the chat that followed');
      assert.deepEqual((await getJson(`${base}/state`)).body.state, BEFORE);
    });
  });
}

test('on an Agent used directly: snapshot(), the next turn and storage do not keep a failed action in-place change', async () => {
  const storage = new MemoryStorage();
  const Notebook = notebookOn(storage);
  const agent = new Notebook('direct');
  assert.deepEqual(await agent.invoke('note', ['kept']), ['kept']);
  await assert.rejects(agent.invoke('scribble', ['lost']), { code: 'scribble_refused' });
  assert.deepEqual(await agent.snapshot(), BEFORE);
  await assert.rejects(agent.invoke('scribbleAfterSetState', ['lost too']), /failed after setState/);
  assert.equal(await agent.chat('hello'), 'hello');
  assert.deepEqual(agent.state, BEFORE);
  assert.deepEqual((await storage.load('direct'))?.state, BEFORE);
  // The record as a fresh instance reads it.
  assert.deepEqual(await new Notebook('direct').snapshot(), BEFORE);

  // An agent never stored: its first turn fails after changing its initial state in place.
  const fresh = new Notebook('fresh');
  await assert.rejects(fresh.invoke('scribble', ['lost']), { code: 'scribble_refused' });
  const initial = { notes: [], tally: { count: 0 } };
  assert.deepEqual(await fresh.snapshot(), initial);
  assert.equal(await fresh.chat('hello'), 'hello');
  assert.deepEqual((await storage.load('fresh'))?.state, initial);
});
