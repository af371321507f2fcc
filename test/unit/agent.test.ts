import assert from 'node:assert/strict';
import { getEventListeners } from 'node:events';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { test } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { Mailbox } from '../../src/lib/mailbox.ts';
import { echoModel } from '../../src/models/echo.ts';
import { scriptedModel } from '../../src/models/scripted.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import type { Storage } from '../../src/storage/storage.ts';
import type { ChatMessage, JsonValue } from '../../src/types.ts';

class Counter extends Agent<{ count: number }> {
  static override actions = ['increment', 'fail', 'pair'];
  constructor(id: string, storage = new MemoryStorage()) {
    super(id, { model: echoModel(), storage, initialState: { count: 0 } });
  }
  async increment({ by = 1 }: { by?: number } = {}): Promise<number> {
    await this.setState((s) => ({ count: s.count + by }));
    return this.state.count;
  }
  async fail(): Promise<void> {
    await this.setState({ count: 1000 });
    throw new Error('after setState');
  }
  pair(a: unknown, b: unknown): unknown[] {
    return [a, b];
  }
}

test('constructor arguments are checked with messages that teach the fix', () => {
  assert.throws(() => new Agent('' as string), /first argument is the agent id/);
  assert.throws(() => new Agent(42 as unknown as string), /first argument is the agent id/);
  assert.throws(() => new Agent('x', null as never), /second argument is an options object/);
  assert.throws(() => new Agent('x', { initialState: [] as never }), /state must be a plain object/);
});

test('initialState written as a class field (where model and system work) fails the first turn with the fix, instead of a state without it', async () => {
  const storage = new MemoryStorage();
  class Fielded extends Agent<{ count: number }> {
    static override actions = ['increment'];
    override model = echoModel();
    initialState = { count: 0 }; // set after the constructor: too late to be the state
    constructor(id: string) {
      super(id, { storage });
    }
    async increment(): Promise<number> {
      await this.setState({ count: this.state.count + 1 });
      return this.state.count;
    }
  }
  const agent = new Fielded('fielded');
  const fix = { name: 'TypeError', message: 'Agent "fielded": initialState is a class field here, set only after the constructor ran; pass it to the constructor instead: super(id, { initialState: {...} })' };
  await assert.rejects(agent.invoke('increment'), fix);
  await assert.rejects(agent.chat('hi'), fix);
  await assert.rejects(agent.snapshot(), fix);
  assert.equal(await storage.load('fielded'), undefined);
});

test('initialState is copied: instances never share a state object', async () => {
  const initialState = { nested: { n: 1 } };
  const a = new Agent('a', { initialState });
  const b = new Agent('b', { initialState });
  assert.notEqual(a.state, b.state);
  assert.notEqual(a.state['nested'], initialState.nested);
  await a.setState({ nested: { n: 2 } });
  assert.deepEqual(b.state, { nested: { n: 1 } });
});

test('the initial state an agent starts over from (its record deleted) shares no object with the state it started with', async () => {
  const storage = new MemoryStorage();
  const agent = new Agent<{ items: string[] }>('fresh', { storage, initialState: { items: [] } });
  // Against the README (treat state as read-only), as plain JavaScript can.
  agent.state.items.push('changed in place');
  await agent.setState({ items: ['stored'] });
  await storage.delete('fresh');
  assert.deepEqual(await agent.snapshot(), { items: [] });
});

test('actions: object params are one argument, arrays are positional, absent is none', async () => {
  const counter = new Counter('c');
  assert.equal(await counter.invoke('increment', { by: 3 }), 3);
  assert.equal(await counter.invoke('increment'), 4);
  assert.deepEqual(await counter.invoke('pair', [1, 'two']), [1, 'two']);
  await assert.rejects(counter.invoke('setState', { count: 1 }), { code: 'unknown_method', status: 404 });
  await assert.rejects(counter.invoke('toString'), { code: 'unknown_method' });
});

test('a turn that throws leaves state and storage as they were', async () => {
  const storage = new MemoryStorage();
  const counter = new Counter('c', storage);
  await counter.invoke('increment', { by: 2 });
  const version = counter.version;
  await assert.rejects(counter.invoke('fail'), /after setState/);
  assert.deepEqual(counter.state, { count: 2 });
  assert.deepEqual((await storage.load('c'))?.state, { count: 2 });
  assert.equal(counter.version, version);
});

test('a setState function that changes the state it is given, then throws or whose turn fails, changes nothing', async () => {
  const storage = new MemoryStorage();
  class List extends Agent<{ items: string[]; n: number }> {
    static override actions = ['add'];
    async add(item: string): Promise<void> {
      await this.setState((state) => {
        state.items.push(item);
        return { items: state.items };
      });
      throw new Error('the action failed after its setState');
    }
  }
  const list = new List('list', { storage, model: echoModel(), initialState: { items: [], n: 0 } });
  await assert.rejects(list.setState((state) => {
    state.items.push('refused');
    state.n = 99;
    throw new Error('refused');
  }), /refused/);
  assert.deepEqual(list.state, { items: [], n: 0 });
  await list.setState({ n: 1 });
  await assert.rejects(list.invoke('add', ['lost']), /failed after its setState/);
  assert.deepEqual(list.state, { items: [], n: 1 });
  await list.chat('a turn that changes no state');
  await list.setState({ n: 2 });
  assert.deepEqual((await storage.load('list'))?.state, { items: [], n: 2 }, 'nothing of the refused updates reached storage later');
  // A function that changes what it is given and succeeds: its changes are kept, as before.
  await list.setState((state) => {
    state.items.push('kept');
    return { n: state.n + 1 };
  });
  assert.deepEqual(list.state, { items: ['kept'], n: 3 });
  await storage.delete('list');
  assert.deepEqual(await list.snapshot(), { items: [], n: 0 }, 'the initial state is as it was given');
});

test('a setState function after an action staged what is not JSON is refused as not JSON (the copy it is given would hide it)', async () => {
  class Point {
    readonly x: number;
    readonly y: number;
    constructor(x: number, y: number) {
      this.x = x;
      this.y = y;
    }
  }
  const storage = new MemoryStorage();
  class Shapes extends Agent {
    static override actions = ['place', 'hook'];
    async place(): Promise<void> {
      await this.setState({ p: new Point(1, 2) as never });
      await this.setState(() => ({ n: 1 }));
    }
    async hook(): Promise<void> {
      await this.setState({ cb: (() => 1) as never });
      await this.setState(() => ({ n: 1 }));
    }
  }
  const shapes = new Shapes('shapes', { storage, model: echoModel() });
  await assert.rejects(shapes.invoke('place'), /not JSON.*Point/);
  await assert.rejects(shapes.invoke('hook'), /not JSON.*function/);
  assert.equal(await storage.load('shapes'), undefined, 'nothing stored');
});

test('setState outside a turn is a turn of its own and is stored', async () => {
  const storage = new MemoryStorage();
  const counter = new Counter('c', storage);
  await counter.setState({ count: 9 });
  assert.deepEqual((await storage.load('c'))?.state, { count: 9 });
  await assert.rejects(counter.setState(null as never), /state must be a plain object/);
  // Written as an Immer or Vue user would: the copy it is given is changed, and nothing returned.
  await assert.rejects(
    counter.setState(((s: { count: number }) => {
      s.count++;
    }) as never),
    { message: 'Agent setState: the update function returned undefined; return the fields to change, e.g. setState((s) => ({ count: s.count + 1 })); the state it is given is a copy, so changing it changes nothing' },
  );
  assert.deepEqual((await storage.load('c'))?.state, { count: 9 });
});

test('setState from outside while a chat turn runs is stored with that turn, or after it when the turn fails', async () => {
  const storage = new MemoryStorage();
  let fail: (error: Error) => void = () => {};
  const agent = new Agent<{ n: number }>('x', {
    storage,
    initialState: { n: 0 },
    model: scriptedModel(() => new Promise<string>((_, reject) => (fail = reject))),
  });
  const chat = agent.chat('hello');
  await new Promise(setImmediate); // the chat turn is waiting on its model
  assert.deepEqual(await agent.setState({ n: 42 }), { n: 42 });
  fail(new Error('model failed'));
  await assert.rejects(chat, /model failed/);
  // Before, the failed chat turn took the update down with it.
  await agent.setState((state) => state); // queued behind the update's own turn
  assert.deepEqual(agent.state, { n: 42 });
  assert.deepEqual((await storage.load('x'))?.state, { n: 42 });
  assert.deepEqual(agent.messages, [], 'the failed chat left no history');
});

test('setState from outside a chat turn is checked at once; if the turn fails, the others are stored each on its own, before the turns waiting behind it', async () => {
  const storage = new MemoryStorage();
  let fail: (error: Error) => void = () => {};
  class Bank extends Agent<{ n: number; open: boolean; log: string[] }> {
    static override actions = ['inc'];
    async inc(): Promise<number> {
      await this.setState((state) => ({ n: state.n + 1 }));
      return this.state.n;
    }
  }
  const bank = new Bank('b', {
    storage,
    initialState: { n: 0, open: true, log: [] },
    model: scriptedModel(() => new Promise<string>((_, reject) => (fail = reject))),
  });
  const chat = bank.chat('hello');
  await new Promise(setImmediate); // the chat turn is waiting on its model
  assert.deepEqual(await bank.setState({ n: 5 }), { n: 5, open: true, log: [] });
  // Refused to its caller, and never applied later.
  await assert.rejects(bank.setState(() => {
    throw new Error('account closed');
  }), /account closed/);
  await assert.rejects(bank.setState({ log: [new Date(0)] } as never), /state is not JSON|holds a Date/);
  await assert.rejects(bank.setState((async () => ({ n: 99 })) as never), /got a promise/);
  // Taken now, but throwing when applied again after the failed turn: left out there, the others kept.
  let audits = 0;
  await bank.setState(() => {
    if (++audits > 1) throw new Error('audited once only');
    return { log: ['audited'] };
  });
  await bank.setState({ open: false });
  // A turn that came while the chat ran waits behind it, and must see what was set during it.
  const inc = bank.invoke('inc');
  fail(new Error('model failed'));
  await assert.rejects(chat, /model failed/);
  assert.equal(await inc, 6);
  assert.equal(audits, 2);
  assert.deepEqual((await storage.load('b'))?.state, { n: 6, open: false, log: [] });
});

test('a setState made while a failed turn\'s carried updates are being stored is a turn of its own: the caller\'s next request comes after it', async () => {
  const memory = new MemoryStorage();
  let during: (() => Promise<void>) | undefined;
  // Commits take a while; the hook runs while the carried updates' own turn commits.
  const storage: Storage = {
    load: (id) => memory.load(id),
    head: (id) => memory.head(id),
    lock: (id, signal) => memory.lock(id, signal),
    async commit(id, turn) {
      const hook = turn.state['tool'] !== undefined ? during : undefined;
      if (hook !== undefined) {
        during = undefined;
        void hook();
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
      return memory.commit(id, turn);
    },
  };
  class Marker extends Agent<{ tool?: string; status?: string }> {
    static override actions = ['mark'];
    async mark(value: string): Promise<string | undefined> {
      await this.setState({ status: value });
      return this.state.status;
    }
  }
  const agent: Marker = new Marker('m', {
    storage,
    initialState: {},
    model: {
      name: 'tool-user',
      async *stream() {
        void agent.setState({ tool: 'used' });
        await new Promise((resolve) => setTimeout(resolve, 20));
        throw new Error('model failed');
      },
    },
  });
  await agent.load();
  let marked: Promise<string | undefined> | undefined;
  during = async () => {
    await agent.setState({ status: 'a' });
    marked = agent.invoke('mark', 'b') as Promise<string | undefined>;
  };
  await assert.rejects(agent.chat('go'), /model failed/);
  await new Promise((resolve) => setTimeout(resolve, 300));
  assert.equal(await marked, 'b');
  await agent.setState((state) => state); // behind whatever is still queued
  assert.deepEqual((await memory.load('m'))?.state, { tool: 'used', status: 'b' }, 'the later write stays last');
});

test("a chat model that calls another agent's action which writes back to the first agent does not deadlock", async () => {
  const storage = new MemoryStorage();
  let caller: Agent<{ n: number }> | undefined;
  class Tool extends Agent {
    static override actions = ['bump'];
    async bump(): Promise<string> {
      await (caller as Agent<{ n: number }>).setState((state) => ({ n: state.n + 1 }));
      return 'bumped';
    }
  }
  const tool = new Tool('tool', { storage });
  caller = new Agent<{ n: number }>('caller', {
    storage,
    initialState: { n: 0 },
    model: scriptedModel(async () => String(await tool.invoke('bump'))),
  });
  assert.equal(await caller.chat('use the tool'), 'bumped');
  assert.deepEqual(caller.state, { n: 1 });
  assert.deepEqual((await storage.load('caller'))?.state, { n: 1 }, 'stored with the chat turn');
});

test('a new instance loads state and history from storage', async () => {
  const storage = new MemoryStorage();
  const first = new Counter('c', storage);
  await first.chat('hello');
  await first.invoke('increment');
  const second = new Counter('c', storage);
  assert.deepEqual(await second.snapshot(), { count: 1 });
  assert.deepEqual(second.messages.map((m) => `${m.role}:${m.content}`), ['user:hello', 'assistant:hello']);
});

test('an instance catches up when another instance wrote a newer version', async () => {
  const storage = new MemoryStorage();
  const a = new Counter('c', storage);
  const b = new Counter('c', storage);
  await a.invoke('increment');
  const first = a.version;
  await b.invoke('increment'); // b loads a's version before its turn, so it does not conflict
  assert.deepEqual(await a.snapshot(), { count: 2 });
  assert.equal(await a.invoke('increment'), 3);
  assert.equal(a.version, first + 2);
});

test('two instances of one id on one MemoryStorage take turns: no conflict, every turn whole and in history', async () => {
  const storage = new MemoryStorage();
  // Every version a commit returns, to count them from the first (record-version.ts: it is random).
  const versions: number[] = [];
  const commit = storage.sync.commit;
  storage.sync.commit = (id, turn) => {
    const version = commit(id, turn);
    versions.push(version);
    return version;
  };
  const slowEcho = scriptedModel(async function* ({ messages }) {
    await new Promise((resolve) => setImmediate(resolve)); // hold the lock across an event-loop turn
    yield messages[messages.length - 1]?.content ?? '';
  });
  const a = new Agent('shared', { model: slowEcho, storage });
  const b = new Agent('shared', { model: slowEcho, storage });
  const replies = await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? a : b).chat(`m${i}`)));
  assert.deepEqual(replies, Array.from({ length: 40 }, (_, i) => `m${i}`));
  const record = await storage.load('shared');
  const first = versions[0] as number;
  assert.deepEqual(versions, Array.from({ length: 40 }, (_, i) => first + i));
  assert.equal(record?.version, first + 39);
  assert.equal(record?.messages.length, 80);
  for (let i = 0; i < 80; i += 2) assert.equal(record?.messages[i]?.content, record?.messages[i + 1]?.content, 'each user message is followed by its own reply');
});

test('a model wrapping another with {...request} hands on a signal that aborts when the turn stops early', async () => {
  let seen: AbortSignal | undefined;
  const inner = scriptedModel(async function* ({ signal, system }) {
    seen = signal;
    yield `system: ${system}`;
    await new Promise((resolve) => signal.addEventListener('abort', resolve));
  });
  const wrapper = { name: 'wrapper', stream: (request: Parameters<typeof inner.stream>[0]) => inner.stream({ ...request, system: 'wrapped' }) };
  const agent = new Agent('wrapped', { model: wrapper });
  for await (const chunk of agent.stream('hi')) {
    assert.equal(chunk, 'system: wrapped');
    break; // stopping early aborts the turn, and so the signal the inner model got
  }
  assert.ok(seen instanceof AbortSignal);
  assert.equal(seen.aborted, true);
  assert.equal(agent.messages.length, 0);
});

test('an instance behind another reads only the turns it missed (loadSince), and its history stays whole', async () => {
  const shared = new MemoryStorage();
  const reads: string[] = [];
  // The storage as another process would reach it: async only, reads counted.
  const storage: Storage = {
    load: (id) => (reads.push('load'), shared.load(id)),
    loadSince: (id, known) => (reads.push(`since ${known.version}/${known.messages}`), shared.loadSince(id, known)),
    commit: (id, turn) => shared.commit(id, turn),
    head: (id) => shared.head(id),
    lock: (id, signal) => shared.lock(id, signal),
  };
  const echo = scriptedModel(({ messages }) => `re: ${messages.at(-1)?.content ?? ''}`);
  const a = new Agent('behind', { model: echo, storage });
  const b = new Agent('behind', { model: echo, storage });
  let first = 0;
  for (let i = 0; i < 3; i++) {
    await a.chat(`a${i}`);
    first ||= a.version;
    await b.chat(`b${i}`);
  }
  await a.snapshot(); // a catches up with b's last turn
  const stored = (await shared.load('behind'))?.messages.map((message) => message.content);
  assert.deepEqual(stored, ['a0', 're: a0', 'b0', 're: b0', 'a1', 're: a1', 'b1', 're: b1', 'a2', 're: a2', 'b2', 're: b2']);
  assert.deepEqual(a.messages.map((message) => message.content), stored);
  assert.deepEqual(b.messages.map((message) => message.content), stored);
  // Each instance loads once, then catches up by the turns it missed.
  assert.deepEqual(reads, ['load', 'load', ...[2, 4, 6, 8, 10].map((messages, i) => `since ${first + i}/${messages}`)]);
});

test('chat without a model fails clearly', async () => {
  const agent = new Agent('x');
  await assert.rejects(agent.chat('hi'), { code: 'no_model', message: /has no model/ });
});

test('usage reported by a model is kept with the assistant message', async () => {
  const agent = new Agent('u', {
    model: scriptedModel(() => ['a', { usage: { inputTokens: 3, outputTokens: 1 } }, 'b'][Symbol.iterator]()),
  });
  assert.equal(await agent.chat('q'), 'ab');
  assert.deepEqual(agent.messages[1], { role: 'assistant', content: 'ab', usage: { inputTokens: 3, outputTokens: 1 } });
});

test('usage: null from a model (a provider that reports none yet) is no usage, and does not drop one reported before', async () => {
  const none = new Agent('n', { model: scriptedModel(() => ['a', { usage: null } as never, 'b'][Symbol.iterator]()) });
  assert.equal(await none.chat('q'), 'ab');
  assert.deepEqual(none.messages[1], { role: 'assistant', content: 'ab' });
  const later = new Agent('l', { model: scriptedModel(() => ['a', { usage: { inputTokens: 3, outputTokens: 1 } }, { usage: null } as never][Symbol.iterator]()) });
  await later.chat('q');
  assert.deepEqual(later.messages[1], { role: 'assistant', content: 'a', usage: { inputTokens: 3, outputTokens: 1 } });
});

test('history messages are frozen, and MemoryStorage keeps those as they are but copies any other', async () => {
  const storage = new MemoryStorage();
  const agent = new Agent('frozen', { storage, model: scriptedModel(() => ['a', { usage: { inputTokens: 3, outputTokens: 1 } }]) });
  await agent.chat('q');
  const [user, assistant] = agent.messages;
  assert.throws(() => {
    (user as { content: string }).content = 'rewritten';
  }, TypeError);
  assert.throws(() => {
    (assistant?.usage as { inputTokens: number }).inputTokens = 0;
  }, TypeError);
  const mutable = { role: 'user' as const, content: 'mine' };
  await storage.commit('other', { expectedVersion: 0, state: {}, append: [mutable] });
  mutable.content = 'changed after the commit';
  assert.equal((await storage.load('other'))?.messages[0]?.content, 'mine');
  assert.deepEqual((await storage.load('frozen'))?.messages, [
    { role: 'user', content: 'q' },
    { role: 'assistant', content: 'a', usage: { inputTokens: 3, outputTokens: 1 } },
  ]);
});

test('agent.messages cannot be changed: pop, push or reverse on it throws, and the history the model is sent stays whole', async () => {
  const storage = new MemoryStorage();
  const seen: string[][] = [];
  const agent = new Agent('read-only-history', {
    storage,
    model: scriptedModel(({ messages }) => {
      seen.push(messages.map((message) => message.content));
      return 'ok';
    }),
  });
  await agent.chat('one');
  const read = agent.messages as ChatMessage[];
  assert.throws(() => read.pop(), TypeError, 'pop() to read the last message would drop it from the history');
  assert.throws(() => read.push({ role: 'user', content: 'forged' }), TypeError);
  assert.throws(() => read.reverse(), TypeError);
  assert.equal([...agent.messages].pop()?.content, 'ok', 'a copy is the user\'s own');
  await agent.chat('two');
  assert.deepEqual(seen.at(-1), ['one', 'ok', 'two']);
  assert.deepEqual(agent.messages.map((message) => message.content), ['one', 'ok', 'two', 'ok']);
  assert.deepEqual((await storage.load('read-only-history'))?.messages.map((message) => message.content), ['one', 'ok', 'two', 'ok']);
  assert.equal(agent.messages, agent.messages, 'reading it twice copies nothing');
});

test('the model gets the system prompt and the history with the new message last', async () => {
  const seen: unknown[] = [];
  const agent = new Agent('s', {
    system: 'Be brief.',
    model: scriptedModel(({ system, messages }) => {
      seen.push({ system, messages: messages.map((m) => m.content) });
      return 'ok';
    }),
  });
  await agent.chat('one');
  await agent.chat('two');
  assert.deepEqual(seen, [
    { system: 'Be brief.', messages: ['one'] },
    { system: 'Be brief.', messages: ['one', 'ok', 'two'] },
  ]);
});

test('a model that changes the messages it is sent changes nothing of the history, loaded from storage or written by the agent', async () => {
  const storage = new MemoryStorage();
  await new Agent('meddled', { storage, model: scriptedModel(['first reply']) }).chat('first');
  let fail = false;
  const agent = new Agent('meddled', {
    storage,
    model: scriptedModel((request) => {
      const messages = request.messages as ChatMessage[];
      // A wrapper adding context the way plain JavaScript lets it, then trimming, then rewriting.
      messages.push({ role: 'user', content: 'context' });
      messages.splice(0, 1);
      assert.throws(() => {
        (messages[0] as { content: string }).content = 'rewritten';
      }, TypeError);
      if (fail) throw new Error('model failed');
      return 'reply';
    }),
  });
  assert.equal(await agent.chat('second'), 'reply');
  const history = ['first', 'first reply', 'second', 'reply'];
  assert.deepEqual(agent.messages.map((m) => m.content), history);
  fail = true;
  await assert.rejects(agent.chat('third'), /model failed/);
  assert.deepEqual(agent.messages.map((m) => m.content), history, 'the failed turn left no trace');
  assert.deepEqual((await storage.load('meddled'))?.messages.map((m) => m.content), history);
});

test('a turn aborted before it starts never runs', async () => {
  let calls = 0;
  const agent = new Agent('a', { model: scriptedModel(() => (calls++, 'x')) });
  const controller = new AbortController();
  controller.abort(new Error('gone'));
  await assert.rejects(agent.chat('hi', { signal: controller.signal }), /gone/);
  assert.equal(calls, 0);
  assert.equal(agent.busy, false);
});

test('stopping a stream early aborts the model and commits nothing', async () => {
  let sawAbort = false;
  const agent = new Agent('a', {
    model: scriptedModel(async function* ({ signal }) {
      signal.addEventListener('abort', () => (sawAbort = true));
      yield 'one';
      yield 'two';
    }),
  });
  for await (const chunk of agent.stream('hi')) {
    assert.equal(chunk, 'one');
    break;
  }
  assert.equal(sawAbort, true);
  assert.equal(agent.messages.length, 0);
  assert.equal(agent.busy, false);
});

test('leaving a stream early with a caller\'s signal aborts the model too (a provider request stops), not the caller\'s signal', async () => {
  let modelSignal: AbortSignal | undefined;
  const agent = new Agent('stream-left-with-signal', {
    model: scriptedModel(async function* ({ signal }) {
      modelSignal = signal;
      yield 'one';
      // Until told to stop (5 s at most): each turn here ends by its consumer or its caller leaving, however slow the machine.
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 5000);
        signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
      });
      yield 'two';
    }),
  });
  const caller = new AbortController();
  for await (const chunk of agent.stream('hi', { signal: caller.signal })) {
    assert.equal(chunk, 'one');
    break;
  }
  assert.equal(modelSignal?.aborted, true, 'the model is told to stop');
  assert.equal(caller.signal.aborted, false);
  assert.equal(agent.messages.length, 0);
  // The caller's own abort still reaches the model.
  const next = new AbortController();
  const turn = agent.chat('again', { signal: next.signal });
  await new Promise((resolve) => setImmediate(resolve));
  next.abort(new Error('caller gave up'));
  await assert.rejects(turn, /caller gave up/);
  assert.equal(modelSignal?.aborted, true);
  assert.match(String(modelSignal?.reason), /caller gave up/);
});

test('a stream cut by its signal while its consumer is not pulling gives the agent back at once, storing nothing', async () => {
  const agent = new Agent('cut-between-chunks', { model: scriptedModel([['one', 'two'], 'next']) });
  const controller = new AbortController();
  const iterator = agent.stream('hi', { signal: controller.signal })[Symbol.asyncIterator]();
  assert.equal((await iterator.next()).value, 'one');
  controller.abort(new Error('timed out'));
  assert.equal(agent.busy, false, 'the agent is free before the consumer pulls again');
  assert.equal(await agent.chat('next'), 'next');
  await assert.rejects(iterator.next(), /timed out/);
  assert.deepEqual(await iterator.next(), { done: true, value: undefined });
  assert.deepEqual(agent.messages.map((m) => m.content), ['next', 'next'], "the cut turn's end touched nothing of the turn after it");
});

test('a stream() iterator dropped unfinished without return() gives the agent back once it is garbage-collected, storing nothing, with a warning', async () => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const agent = new Agent('dropped-stream', { model: scriptedModel([['one', 'two'], 'next']) });
  const warnings: Error[] = [];
  const onWarning = (warning: Error): void => {
    warnings.push(warning);
  };
  process.on('warning', onWarning);
  // A signal that outlives the stream, as a server's shutdown signal does: the dropped turn leaves no listener on it.
  const shared = new AbortController().signal;
  try {
    await (async () => {
      const iterator = agent.stream('hi', { signal: shared })[Symbol.asyncIterator]();
      assert.equal((await iterator.next()).value, 'one');
      assert.ok(getEventListeners(shared, 'abort').length > 0);
      // Dropped here: neither pulled again nor return()ed.
    })();
    assert.equal(agent.busy, true);
    let reply: string | undefined;
    void agent.chat('next').then((text) => (reply = text));
    for (let i = 0; i < 50 && reply === undefined; i++) {
      gc();
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.equal(reply, 'next', 'the next turn ran');
  } finally {
    process.off('warning', onWarning);
  }
  assert.deepEqual(agent.messages.map((m) => m.content), ['next', 'next']);
  assert.equal((warnings[0] as { code?: string } | undefined)?.code, 'dropped_stream');
  assert.equal(getEventListeners(shared, 'abort').length, 0, 'the signal keeps nothing of the dropped turn');
});

test('Mailbox runs holders one at a time in arrival order', async () => {
  const mailbox = new Mailbox();
  const order: number[] = [];
  await Promise.all([1, 2, 3].map(async (n) => {
    await mailbox.acquire();
    order.push(n);
    await new Promise((resolve) => setImmediate(resolve));
    order.push(-n);
    mailbox.release();
  }));
  assert.deepEqual(order, [1, -1, 2, -2, 3, -3]);
  assert.equal(mailbox.size, 0);
});

test('echoModel chunks concatenate to the message, whitespace included', async () => {
  const chunks: string[] = [];
  const signal = new AbortController().signal;
  for await (const chunk of echoModel().stream({ system: undefined, messages: [{ role: 'user', content: '  two  words \n' }], signal })) {
    chunks.push(chunk as string);
  }
  assert.equal(chunks.join(''), '  two  words \n');
  assert.deepEqual(chunks, ['  two', '  words', ' \n']);
});

test('scriptedModel uses replies in turn and fails past the end', async () => {
  const agent = new Agent('s', { model: scriptedModel(['first', ['sec', 'ond']]) });
  assert.equal(await agent.chat('a'), 'first');
  assert.equal(await agent.chat('b'), 'second');
  await assert.rejects(agent.chat('c'), /only 2 replies/);
  assert.throws(() => scriptedModel('nope' as never), /array of replies or a function/);
});

test('a model that ignores its signal cannot hold a chat turn: aborting ends it at once and a late chunk is dropped', async () => {
  let release!: () => void;
  const late = new Promise<void>((resolve) => (release = resolve));
  const agent = new Agent('deaf-model', {
    model: scriptedModel(async function* () {
      yield 'early ';
      await late; // deaf to the signal
      yield 'late';
    }),
  });
  const controller = new AbortController();
  const turn = agent.chat('hi', { signal: controller.signal });
  await new Promise((resolve) => setImmediate(resolve));
  controller.abort(new Error('client gone'));
  await assert.rejects(turn, /client gone/);
  assert.equal(agent.busy, false);
  assert.equal(agent.messages.length, 0);
  release();
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(agent.messages.length, 0, 'the late chunk changed nothing');
  agent.model = scriptedModel(['next']);
  assert.equal(await agent.chat('again'), 'next');
  assert.deepEqual(agent.messages.map((m) => m.content), ['again', 'next']);
});

test('a model whose stream() throws at once fails that turn only', async () => {
  const agent = new Agent('broken-model', {
    model: {
      name: 'broken',
      stream: () => {
        throw new Error('no stream today');
      },
    },
  });
  await assert.rejects(agent.chat('hi'), /no stream today/);
  assert.equal(agent.busy, false);
  assert.equal(agent.messages.length, 0);
  agent.model = scriptedModel(['fine']);
  assert.equal(await agent.chat('hi'), 'fine');
});

test('chat over a storage with no synchronous path (lock, commit and unlock awaited) commits one whole turn', async () => {
  const memory = new MemoryStorage();
  const unlocked: string[] = [];
  const storage: Storage = {
    load: (id) => memory.load(id),
    commit: async (id, turn) => {
      await new Promise((resolve) => setImmediate(resolve));
      return memory.commit(id, turn);
    },
    head: (id) => memory.head(id),
    lock: async (id) => {
      const unlock = await memory.lock(id);
      return async () => {
        await new Promise((resolve) => setImmediate(resolve));
        unlocked.push(id);
        await unlock();
      };
    },
  };
  const agent = new Agent('slow-store', { model: scriptedModel([['a', 'b'], 'c']), storage });
  const [first, second] = await Promise.all([agent.chat('one'), agent.chat('two')]);
  assert.deepEqual([first, second], ['ab', 'c']);
  assert.deepEqual(unlocked, ['slow-store', 'slow-store']);
  assert.equal(agent.busy, false);
  assert.deepEqual((await memory.load('slow-store'))?.messages.map((m) => m.content), ['one', 'ab', 'two', 'c']);
});

test('a failing commit rejects chat and leaves history as it was', async () => {
  const memory = new MemoryStorage();
  let fail = true;
  const storage: Storage = {
    load: (id) => memory.load(id),
    commit: async (id, turn) => {
      if (fail) throw new Error('disk full');
      return memory.commit(id, turn);
    },
  };
  const agent = new Agent('failing-commit', { model: scriptedModel(['lost', 'kept']), storage });
  await assert.rejects(agent.chat('one'), /disk full/);
  assert.equal(agent.messages.length, 0);
  fail = false;
  assert.equal(await agent.chat('two'), 'kept');
  assert.deepEqual(agent.messages.map((m) => m.content), ['two', 'kept']);
});

function deeplyNested(depth: number): unknown {
  let value: unknown = 1;
  for (let i = 0; i < depth; i++) value = { inner: value };
  return value;
}

test('state and action results must be JSON: a turn that would store or answer anything else fails and changes nothing', async () => {
  const storage = new MemoryStorage();
  class Careless extends Agent {
    static override actions = ['stash', 'answer', 'when', 'echo', 'generate', 'generateLater'];
    constructor(id: string) {
      super(id, { storage, initialState: { n: 0 } });
    }
    async stash(value: unknown): Promise<string> {
      await this.setState({ value: value as JsonValue });
      return 'stored';
    }
    async answer(): Promise<unknown> {
      await this.setState({ n: 1000 });
      return { when: 10n };
    }
    async when(): Promise<Date> {
      return new Date(0);
    }
    async echo(value: unknown): Promise<unknown> {
      return value;
    }
    // Written as generators by mistake: called, they return unstarted, so the setState never runs.
    *generate(): Generator<number> {
      yield 1;
    }
    async *generateLater(): AsyncGenerator<number> {
      await this.setState({ n: 7 });
      yield 1;
    }
  }
  const agent = new Careless('careless-1');
  const cycle: Record<string, unknown> = {};
  cycle['self'] = cycle;
  const bad: Array<[unknown, RegExp]> = [
    [10n, /state is not JSON: it holds a BigInt \(key "value"\)/],
    [Number.NaN, /NaN \(key "value"\)/],
    [{ deep: [1, Infinity] }, /Infinity \(key "1"\)/],
    [new Map([['a', 1]]), /a Map \(key "value"\)/],
    [cycle, /a circular reference/],
    [{ odd: { toJSON: () => { throw new Error('no'); } } }, /a value whose toJSON\(\) threw/],
    // What toJSON() would turn into something else: a Date read back as a string after a restart.
    [new Date(0), /state is not JSON: it holds a Date \(key "value"\), which would come back as a string; store date.toISOString\(\)/],
    [{ at: [Buffer.from('x')] }, /a Buffer \(key "0"\) that JSON stores as its toJSON\(\)/],
    // What JSON writes as {} or as an object of indexes, and what would come back without its prototype.
    [/x/g, /a RegExp \(key "value"\)/],
    [new Error('e'), /an Error \(key "value"\)/],
    [{ bytes: new Uint8Array([1, 2]) }, /a Uint8Array \(key "bytes"\)/],
    [new (class Point { x = 1 })(), /a Point \(key "value"\), which would come back from storage as a plain object/],
    [{ n: new Number(5) }, /a Number \(key "n"\), which would come back from storage as a plain value/],
    [deeplyNested(20_000), /state is not JSON: it holds values nested too deeply to write/],
  ];
  for (const [value, message] of bad) {
    await assert.rejects(agent.invoke('stash', [value]), message);
  }
  await assert.rejects(agent.invoke('answer'), /action answer's result is not JSON: it holds a BigInt \(key "when"\)/);
  await assert.rejects(agent.invoke('echo', [{ pattern: /x/ }]), /action echo's result is not JSON: it holds a RegExp \(key "pattern"\)/);
  await assert.rejects(agent.invoke('generate'), /action generate's result is not JSON: it holds a generator \(an action returns its result; a generator action never runs\)/);
  await assert.rejects(agent.invoke('generateLater'), /action generateLater's result is not JSON: it holds a generator/);
  const point = new (class Point { x = 1 })();
  assert.equal(await agent.invoke('echo', [point]), point, 'a result may be a class instance: it is sent once, as its JSON');
  assert.deepEqual(await agent.invoke('when'), new Date(0), 'a result may be a Date: it is sent once, as its ISO string');
  await assert.rejects(agent.setState({ n: Number.POSITIVE_INFINITY }), /Infinity/);
  // initialState too, when the agent is made: else every later setState would be refused for a key it never set.
  assert.throws(() => new Agent('dated', { initialState: { created: new Date(0) } as never }), /Agent "dated": initialState is not JSON: it holds a Date \(key "created"\)/);
  assert.deepEqual(agent.state, { n: 0 });
  assert.equal(agent.version, 0, 'nothing was committed');
  assert.equal(await storage.load('careless-1'), undefined, 'nothing was stored');
  assert.equal(await agent.invoke('stash', [runInNewContext('({ plain: { list: [1, 2] } })')]), 'stored', "plain objects and arrays of another realm (a vm context, a test runner's) are JSON");
  assert.equal(await agent.invoke('stash', [{ ok: [1, 'two', null], at: new Date(0).toISOString() }]), 'stored');
  assert.equal((await storage.load('careless-1'))?.version, agent.version);
});

test('a model that is not a Model is refused when the agent is made, not at its first turn', () => {
  for (const model of [{}, 'gpt-4o', { stream: 'yes' }, null]) {
    assert.throws(() => new Agent('a', { model: model as never }), /Agent: model must be a Model, an object with a stream\(request\) method/, String(model));
  }
});

test('a chat turn cut while its commit is in flight ends as the commit does: stored and reported done, history the same in memory and storage', async () => {
  const inner = new MemoryStorage();
  let commitStarted: () => void = () => {};
  let finishCommit: () => void = () => {};
  // An asynchronous storage (no `sync`), whose commit is held open until the test lets it finish.
  const slow: Storage = {
    load: (id) => inner.load(id),
    async commit(id, turn) {
      const version = await inner.commit(id, turn);
      commitStarted();
      await new Promise<void>((resolve) => (finishCommit = resolve));
      return version;
    },
  };
  const agent = new Agent('committing', { model: scriptedModel(({ messages }) => `R:${messages.at(-1)?.content}`), storage: slow });
  const first = agent.chat('one');
  await new Promise<void>((resolve) => (commitStarted = resolve));
  finishCommit();
  await first;
  const client = new AbortController();
  const second = agent.chat('two', { signal: client.signal });
  await new Promise<void>((resolve) => (commitStarted = resolve));
  client.abort(new Error('the client left'));
  finishCommit();
  assert.equal(await second, 'R:two', 'the turn was stored, so it is reported done');
  const stored = await inner.load('committing');
  assert.deepEqual(agent.messages.map((m) => m.content), ['one', 'R:one', 'two', 'R:two']);
  assert.deepEqual(stored?.messages.map((m) => m.content), ['one', 'R:one', 'two', 'R:two']);
});

test('an agent whose record was deleted from storage starts over; one without head() recovers after a single 409', async () => {
  const storage = new MemoryStorage();
  const model = scriptedModel(({ messages }) => `R:${messages.at(-1)?.content}`);
  const agent = new Agent<{ n: number }>('deleted', { model, storage, initialState: { n: 0 } });
  await agent.chat('one');
  await agent.setState({ n: 5 });
  await storage.delete('deleted');
  assert.deepEqual(await agent.snapshot(), { n: 0 }, 'state is the initial one again');
  assert.equal(await agent.chat('again'), 'R:again');
  assert.deepEqual(agent.messages.map((m) => m.content), ['again', 'R:again']);
  assert.deepEqual((await storage.load('deleted'))?.messages.map((m) => m.content), ['again', 'R:again']);

  // A storage of one's own with neither head() nor sync: staleness shows only as a refused commit.
  const shared = new MemoryStorage();
  const headless: Storage = { load: (id) => shared.load(id), commit: (id, turn) => shared.commit(id, turn) };
  const first = new Agent('headless', { model, storage: headless });
  const second = new Agent('headless', { model, storage: headless });
  await first.chat('a');
  await second.chat('b'); // first is now behind, and cannot tell
  await assert.rejects(first.chat('c'), { code: 'version_conflict' });
  assert.equal(await first.chat('d'), 'R:d', 'the refused commit made it reload');
  assert.deepEqual(first.messages.map((m) => m.content), ['a', 'R:a', 'b', 'R:b', 'd', 'R:d']);
});
