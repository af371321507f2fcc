/**
 * The Storage contract: what every backend promises, as one suite run
 * against each (test/integration/storage-contract.test.ts). A backend opened
 * twice stands for two processes sharing it.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { VersionConflictError } from '../../src/errors.ts';
import { sameRecord } from '../../src/storage/record-version.ts';
import type { AgentRecord, Storage, TurnCommit, Unlock } from '../../src/storage/storage.ts';
import type { ChatMessage, JsonObject } from '../../src/types.ts';
import type { StorageBackend } from './storage-backends.ts';

/** Ids that break naive file names or keys; each must get a record of its own. */
export const ODD_IDS: readonly string[] = [
  '../x', '..', '.', 'a/b', 'a\\b', '/etc/passwd', 'C:\\x', 'CON', 'con', 'NUL.txt', 'nul.txt', 'COM1', 'aux.json',
  'Bob', 'bob', 'BOB', 'x'.repeat(10_000), `${'x'.repeat(9_999)}y`, '', ' ', 'trailing.', 'trailing ',
  'ünïcödé', 'u\u0308nicode', 'üñí', '日本語のエージェント', 'عامل', '🤖 bot', '👨‍👩‍👧', 'ǅ', 'ß', 'SS', 'İ', 'i̇',
  'new\nline', 'tab\there', 'quote"d', "apos'", 'semi;colon', 'dollar$1', 'percent%2F', 'star*', 'q?', 'br{ace}', '}{', 'a:b:c',
];

const user = (content: string): ChatMessage => ({ role: 'user', content });
const assistant = (content: string): ChatMessage => ({ role: 'assistant', content });

let counter = 0;
/** A fresh id per test, so tests sharing a backend never meet. */
function freshId(label: string): string {
  counter += 1;
  return `${label}-${counter}`;
}

/** Asserts that a commit on `expectedVersion` returned `version`: one more, or for a new record any first version (record-version.ts). */
function assertNextVersion(version: number, expectedVersion: number): void {
  if (expectedVersion === 0) assert.ok(Number.isSafeInteger(version) && version > 0, `a first version: ${version}`);
  else assert.equal(version, expectedVersion + 1);
}

async function commitOk(storage: Storage, id: string, turn: TurnCommit): Promise<number> {
  const version = await storage.commit(id, turn);
  assertNextVersion(version, turn.expectedVersion);
  return version;
}

function isConflict(error: unknown): boolean {
  return error instanceof VersionConflictError && error.status === 409 && error.code === 'version_conflict';
}

/** Registers the contract's tests for one backend (call inside a describe). */
export function defineStorageContract(backend: StorageBackend): void {
  after(() => backend.cleanup());

  test('an unknown id loads as undefined, with head 0', async () => {
    const storage = await backend.open();
    const id = freshId('unknown');
    assert.equal(await storage.load(id), undefined);
    assert.equal(await storage.head?.(id) ?? 0, 0);
  });

  test('commit then load round-trips state and messages exactly, key order included', async () => {
    const storage = await backend.open();
    const id = freshId('round-trip');
    const state: JsonObject = { zeta: 1, alpha: { nested: [1, 'two', null, true, { deep: 'é' }] }, count: 0.5, empty: {}, text: 'line\nbreak "quoted" \\ \u2028' };
    const messages: ChatMessage[] = [
      user('héllo 👋\nsecond line'),
      { role: 'assistant', content: 'hi', usage: { inputTokens: 3, outputTokens: 1, totalTokens: 4 } },
      user('go on'),
      { role: 'assistant', content: 'cut sh', usage: { outputTokens: 2 }, truncated: true },
    ];
    const version = await commitOk(storage, id, { expectedVersion: 0, state, append: messages });
    const record = await storage.load(id) as AgentRecord;
    assert.deepEqual(record, { state, messages, version });
    assert.equal(JSON.stringify(record.state), JSON.stringify(state));
    record.state['zeta'] = 99; // a loaded record is the caller's copy
    record.messages.push(user('not stored'));
    assert.deepEqual(await storage.load(id), { state, messages, version });
  });

  test('a commit whose messages are not {role, content} strings is refused at write (TypeError), leaving nothing a read would refuse', async () => {
    const storage = await backend.open();
    for (const bad of [42, null, { role: 'user' }, { role: 'tool', content: { result: 1 } }]) {
      await assert.rejects(storage.commit('bad-append', { expectedVersion: 0, state: {}, append: [{ role: 'user', content: 'ok' }, bad as never] }), (error: Error) => {
        assert.ok(error instanceof TypeError);
        assert.match(error.message, /append\[1\] must be a message \{ role: string, content: string \}/);
        return true;
      });
    }
    assert.equal(await storage.load('bad-append'), undefined);
  });

  test('the first commit sets a version and each later one adds one; head follows', async () => {
    const storage = await backend.open();
    const id = freshId('versions');
    let version = 0;
    const versions: number[] = [];
    for (let index = 0; index < 5; index++) {
      version = await commitOk(storage, id, { expectedVersion: version, state: { index }, append: [] });
      versions.push(version);
      if (storage.head) assert.equal(await storage.head(id), version);
    }
    const first = versions[0] as number;
    assert.deepEqual(versions, [first, first + 1, first + 2, first + 3, first + 4]);
    assert.equal((await storage.load(id))?.version, first + 4);
  });

  test('a stale or future expectedVersion is refused with VersionConflictError and writes nothing', async () => {
    const storage = await backend.open();
    const id = freshId('conflict');
    const first = await commitOk(storage, id, { expectedVersion: 0, state: { n: 1 }, append: [user('one')] });
    const second = await commitOk(storage, id, { expectedVersion: first, state: { n: 2 }, append: [user('two')] });
    for (const expectedVersion of [0, first, second + 1, second + 98]) {
      await assert.rejects(storage.commit(id, { expectedVersion, state: { n: -1 }, append: [user('lost')] }), isConflict);
    }
    assert.deepEqual(await storage.load(id), { state: { n: 2 }, messages: [user('one'), user('two')], version: second });
  });

  test('history is append-only in commit order; a commit appending nothing changes only state and version', async () => {
    const storage = await backend.open();
    const id = freshId('append');
    const batches: ChatMessage[][] = [[user('a'), assistant('b')], [], [user('c')], [user('d'), assistant('e'), assistant('f')], []];
    let version = 0;
    let first = 0;
    for (const [index, append] of batches.entries()) {
      version = await commitOk(storage, id, { expectedVersion: version, state: { index }, append });
      first ||= version;
    }
    assert.deepEqual(await storage.load(id), { state: { index: 4 }, messages: batches.flat(), version: first + 4 });
  });

  test('a large history (5,000 messages, one commit of 3,000) loads whole and in order', async () => {
    const storage = await backend.open();
    const id = freshId('large');
    let version = 0;
    let first = 0;
    const expected: ChatMessage[] = [];
    for (let turn = 0; turn < 20; turn++) {
      const append = Array.from({ length: 100 }, (_, i) => (i % 2 === 0 ? user : assistant)(`t${turn} m${i} ${'·'.repeat(i)}`));
      expected.push(...append);
      version = await commitOk(storage, id, { expectedVersion: version, state: { turn }, append });
      first ||= version;
    }
    const big = Array.from({ length: 3000 }, (_, i) => user(`bulk ${i}`));
    expected.push(...big);
    version = await commitOk(storage, id, { expectedVersion: version, state: { turn: 'bulk' }, append: big });
    const record = await storage.load(id) as AgentRecord;
    assert.equal(record.version, first + 20);
    assert.equal(record.messages.length, 5000);
    assert.deepEqual(record.messages, expected);
  });

  test('delete forgets the agent; the id then starts a new record, on versions the deleted one never had', async () => {
    const storage = await backend.open();
    const id = freshId('delete');
    const first = await commitOk(storage, id, { expectedVersion: 0, state: { a: 1 }, append: [user('x')] });
    const second = await commitOk(storage, id, { expectedVersion: first, state: { a: 2 }, append: [] });
    assert.ok(sameRecord(first, second));
    await storage.delete?.(id);
    assert.equal(await storage.load(id), undefined);
    if (storage.head) assert.equal(await storage.head(id), 0);
    await assert.rejects(storage.commit(id, { expectedVersion: second, state: {}, append: [] }), isConflict);
    const again = await commitOk(storage, id, { expectedVersion: 0, state: { a: 3 }, append: [user('again')] });
    // A live instance still holding the deleted record must see another record, not a version it knows.
    assert.ok(again !== first && again !== second, `the new record took version ${again} of the deleted one (${first}, ${second})`);
    assert.equal(sameRecord(again, first), false);
    assert.equal(sameRecord(again, second), false);
    assert.deepEqual(await storage.load(id), { state: { a: 3 }, messages: [user('again')], version: again });
    await storage.delete?.(freshId('never-stored')); // deleting an unknown id is fine
  });

  test('odd ids (paths, device names, case variants, 10,000 chars, unicode) each keep a record of their own', async () => {
    const storage = await backend.open();
    const other = await backend.open();
    const prefix = freshId('odd');
    // Each id prefixed per run would hide the bare-name cases (`..`, `CON`), so
    // the bare ids are used as they are; this backend instance is fresh per run.
    const ids = [...ODD_IDS.map((id) => `${prefix}${id}`), ...ODD_IDS];
    assert.equal(new Set(ids).size, ids.length);
    const versions = await Promise.all(ids.map(async (id, index) => {
      await storage.delete?.(id);
      return commitOk(storage, id, { expectedVersion: 0, state: { index }, append: [user(id)] });
    }));
    for (const [index, id] of ids.entries()) {
      assert.deepEqual(await other.load(id), { state: { index }, messages: [user(id)], version: versions[index] }, `id #${index}`);
    }
  });

  test(backend.acceptsAnyString
    ? 'ids that are not well-formed Unicode, or hold NUL, are stored apart'
    : 'ids that are not well-formed Unicode are refused with invalid_agent_id, never merged', async () => {
    const storage = await backend.open();
    const prefix = freshId('surrogate');
    const ids = [`${prefix}\ud800`, `${prefix}\udc00`, `${prefix}\ud83e`];
    if (backend.acceptsAnyString) {
      const all = [...ids, `${prefix}\u0000`, `${prefix}\u0000x`];
      for (const [index, id] of all.entries()) await commitOk(storage, id, { expectedVersion: 0, state: { index }, append: [] });
      for (const [index, id] of all.entries()) assert.deepEqual((await storage.load(id))?.state, { index });
      return;
    }
    for (const id of ids) {
      await assert.rejects(storage.commit(id, { expectedVersion: 0, state: {}, append: [] }), { status: 400, code: 'invalid_agent_id' });
      await assert.rejects(storage.load(id), { code: 'invalid_agent_id' });
    }
  });

  test('N parallel commits on one version, from several openers: exactly one wins each round', async () => {
    const openers = await Promise.all(Array.from({ length: 4 }, () => backend.open()));
    const id = freshId('race');
    const rounds = 5;
    const callers = 8;
    const winners: string[] = [];
    let version = 0;
    let first = 0;
    for (let round = 0; round < rounds; round++) {
      const expectedVersion = version;
      const results = await Promise.allSettled(Array.from({ length: callers }, (_, caller) =>
        (openers[caller % openers.length] as Storage).commit(id, {
          expectedVersion, state: { round, caller }, append: [user(`r${round} c${caller}`)],
        })));
      const won = results.flatMap((result, caller) => (result.status === 'fulfilled' ? [caller] : []));
      assert.equal(won.length, 1, `round ${round}: ${won.length} winners`);
      for (const result of results) {
        if (result.status === 'rejected') assert.ok(isConflict(result.reason), `round ${round}: ${String(result.reason)}`);
        else {
          assertNextVersion(result.value, expectedVersion);
          version = result.value;
        }
      }
      first ||= version;
      winners.push(`r${round} c${won[0]}`);
    }
    const record = await (openers[0] as Storage).load(id) as AgentRecord;
    assert.equal(record.version, first + rounds - 1);
    assert.deepEqual(record.messages.map((message) => message.content), winners);
  });

  test(backend.locks ? 'has lock() for turns across processes' : 'has no lock(): one process only', async () => {
    assert.equal(typeof (await backend.open()).lock === 'function', backend.locks);
  });

  test(backend.loadsSince ? 'has loadSince(): only the history a caller lacks' : 'has no loadSince(): agents reload the whole record', async () => {
    assert.equal(typeof (await backend.open()).loadSince === 'function', backend.loadsSince);
  });

  if (backend.loadsSince) {
    test('loadSince returns the state and version of load, with only the messages after what the caller knows', async () => {
      const [a, b] = [await backend.open(), await backend.open()];
      const id = freshId('since');
      assert.equal(await b.loadSince?.(id, { version: 0, messages: 0 }), undefined);
      const v1 = await commitOk(a, id, { expectedVersion: 0, state: { n: 1 }, append: [user('q1'), assistant('a1')] });
      const v2 = await commitOk(a, id, { expectedVersion: v1, state: { n: 2 }, append: [] });
      const v3 = await commitOk(a, id, { expectedVersion: v2, state: { n: 3 }, append: [user('q2'), assistant('a2\nwith "quotes"')] });
      const v4 = await commitOk(a, id, { expectedVersion: v3, state: { n: 4 }, append: [user('q3')] });
      const whole = await b.load(id) as AgentRecord;
      // Known: the first version with its 2 messages; the second appended none.
      for (const known of [{ version: v1, messages: 2 }, { version: v2, messages: 2 }]) {
        const tail = await b.loadSince?.(id, known) as AgentRecord;
        assert.deepEqual(tail, { state: whole.state, version: v4, messages: whole.messages.slice(2) }, JSON.stringify(known));
      }
      assert.deepEqual((await b.loadSince?.(id, { version: v4, messages: 5 }))?.messages, [], 'nothing new');
    });
  }

  if (backend.locks) defineLockContract(backend);
}

/** `storage.lock`, bound, asserting the backend has one. */
function lockOf(storage: Storage): (id: string, signal?: AbortSignal) => Promise<Unlock> {
  const lock = storage.lock;
  assert.ok(lock, 'this backend has no lock()');
  return (id, signal) => lock.call(storage, id, signal);
}

function defineLockContract(backend: StorageBackend): void {

  test('lock: a second locker waits until the holder unlocks', async () => {
    const [a, b] = [await backend.open(), await backend.open()];
    const id = freshId('lock');
    const events: string[] = [];
    const unlockA = await lockOf(a)(id);
    const lockedB = lockOf(b)(id).then((unlock) => {
      events.push('B locked');
      return unlock;
    });
    // The holder works through a few round trips while B is waiting.
    let version = await a.head?.(id) ?? 0;
    for (let i = 0; i < 3; i++) version = await commitOk(a, id, { expectedVersion: version, state: { i }, append: [user(`a${i}`)] });
    events.push('A unlocks');
    await unlockA();
    await unlockA(); // idempotent
    const unlockB = await lockedB;
    assert.deepEqual(events, ['A unlocks', 'B locked']);
    assert.equal(await b.head?.(id), version);
    await commitOk(b, id, { expectedVersion: version, state: { i: 3 }, append: [user('b')] });
    await unlockB();
  });

  test('lock: an abort while waiting rejects with its reason and leaves no lock behind', async () => {
    const [a, b] = [await backend.open(), await backend.open()];
    const lock = lockOf;
    const id = freshId('abort');
    await assert.rejects(lock(b)(id, AbortSignal.abort(new Error('already aborted'))), /already aborted/);
    const unlockA = await lock(a)(id);
    const controller = new AbortController();
    const waiting = lock(b)(id, controller.signal);
    controller.abort(new Error('client went away'));
    // The rejection must come while A still holds the lock. A watchdog (not a
    // timing assertion) turns a wait that never ends into a clear failure
    // instead of a hung suite.
    let watchdog: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      waiting.then(() => 'locked', (error: unknown) => error),
      new Promise((resolve) => (watchdog = setTimeout(resolve, 15_000, 'still waiting'))),
    ]);
    clearTimeout(watchdog);
    await unlockA();
    if (outcome === 'still waiting') {
      await waiting.then((unlock) => unlock(), () => undefined); // drain before failing
      assert.fail('an abort must end the wait while the lock is still held; the wait went on until the holder unlocked');
    }
    assert.match(String(outcome), /client went away/);
    const unlockB = await lock(b)(id, AbortSignal.timeout(20_000));
    await unlockB();
    const unlockAgain = await lock(a)(id, AbortSignal.timeout(20_000));
    await unlockAgain();
  });

  test('lock: turns from several openers in parallel serialize; every turn lands once and whole', async () => {
    const openers = await Promise.all(Array.from({ length: 4 }, () => backend.open()));
    const id = freshId('turns');
    const turnsEach = 5;
    const versions: number[] = [];
    await Promise.all(openers.map(async (storage, who) => {
      for (let turn = 0; turn < turnsEach; turn++) {
        const unlock = await lockOf(storage)(id, AbortSignal.timeout(60_000));
        try {
          const record = await storage.load(id);
          const version = record?.version ?? 0;
          const count = Number(record?.state['count'] ?? 0);
          const tag = `w${who} t${turn}`;
          versions.push(await commitOk(storage, id, { expectedVersion: version, state: { count: count + 1 }, append: [user(tag), assistant(`re ${tag}`)] }));
        } finally {
          await unlock();
        }
      }
    }));
    const record = await (openers[0] as Storage).load(id) as AgentRecord;
    const total = openers.length * turnsEach;
    const first = Math.min(...versions);
    assert.deepEqual(versions.sort((x, y) => x - y), Array.from({ length: total }, (_, i) => first + i), 'one version per turn');
    assert.equal(record.version, first + total - 1);
    assert.deepEqual(record.state, { count: total });
    assert.equal(record.messages.length, total * 2);
    const seen = new Set<string>();
    for (let i = 0; i < record.messages.length; i += 2) {
      const asked = record.messages[i] as ChatMessage;
      assert.equal(asked.role, 'user');
      assert.deepEqual(record.messages[i + 1], assistant(`re ${asked.content}`), 'each reply follows its own question');
      assert.ok(!seen.has(asked.content), `${asked.content} landed twice`);
      seen.add(asked.content);
    }
    assert.equal(seen.size, total);
  });

  const { openDying } = backend;
  if (openDying === undefined) return;
  test('lock: a holder that stops renewing loses the id after its lease, and its late commit is fenced', async () => {
    const dying = await openDying();
    const survivor = await backend.open();
    const id = freshId('lease');
    const first = await commitOk(survivor, id, { expectedVersion: 0, state: { by: 'first' }, append: [] });
    const events: string[] = [];
    const zombieUnlock = await lockOf(dying.storage)(id);
    const zombieSaw = await dying.storage.head?.(id) ?? first;
    const taken = lockOf(survivor)(id, AbortSignal.timeout(20_000)).then((unlock) => {
      events.push('survivor locked');
      return unlock;
    });
    events.push('lease lapses');
    dying.expire();
    const unlock = await taken;
    assert.deepEqual(events, ['lease lapses', 'survivor locked']);
    const second = await commitOk(survivor, id, { expectedVersion: first, state: { by: 'survivor' }, append: [user('survivor turn')] });
    await unlock();
    // The holder wakes up and commits what it started from the first version: refused.
    await assert.rejects(dying.storage.commit(id, { expectedVersion: zombieSaw, state: { by: 'zombie' }, append: [user('zombie turn')] }));
    await zombieUnlock();
    assert.deepEqual(await survivor.load(id), { state: { by: 'survivor' }, messages: [user('survivor turn')], version: second });
  });
}
