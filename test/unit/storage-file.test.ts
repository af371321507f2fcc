/**
 * FileStorage on a real temp directory: the journal survives torn writes,
 * compaction keeps every turn, other writers' appends and compactions are
 * noticed, and lock files behave as leases.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { randomUUID } from 'node:crypto';
import fsPromises, { appendFile, mkdtemp, open as fsOpen, readdir, readFile, rm, stat, symlink, utimes, writeFile } from 'node:fs/promises';
import { syncBuiltinESMExports } from 'node:module';
import { hostname, tmpdir } from 'node:os';
import path from 'node:path';
import { mock, test } from 'node:test';
import { Worker } from 'node:worker_threads';
import type { TestContext } from 'node:test';
import { FileStorage } from '../../src/storage/file.ts';
import type { FileStorageOptions } from '../../src/storage/file.ts';
import { journalBaseName } from '../../src/storage/file-names.ts';
import type { ChatMessage } from '../../src/types.ts';
import { counterOn, echoOn, serveAgents } from '../helpers/agents.ts';
import { getJson, postJson } from '../helpers/http.ts';

const user = (content: string): ChatMessage => ({ role: 'user', content });

async function tempDir(t: TestContext): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'agent-router-file-unit-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

function open(t: TestContext, dir: string, options: FileStorageOptions = {}): FileStorage {
  const storage = new FileStorage(dir, options);
  t.after(() => storage.close());
  return storage;
}

const journalOf = (dir: string, id: string): string => path.join(dir, `${journalBaseName(id)}.jsonl`);
const lockOf = (dir: string, id: string): string => path.join(dir, `${journalBaseName(id)}.lock`);

/** The prototype of every FileHandle, whose methods a test mocks to make the disk fail (taken from a probe file in `dir`). */
async function fileHandlePrototype<T>(dir: string): Promise<T> {
  const probe = await fsOpen(path.join(dir, 'probe'), 'w');
  const prototype = Object.getPrototypeOf(probe) as T;
  await probe.close();
  return prototype;
}

/** What a flush on a disk reporting an I/O error throws. */
const flushError = (): Error => Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
/** What the storage throws for a disk that fails: storage_unavailable, with the file system's error as its cause. */
const outage = (code: string) => (error: { code?: unknown; cause?: { code?: unknown } }): boolean => error.code === 'storage_unavailable' && error.cause?.code === code;

/** Where an id's journal stands: its version (the first is random: record-version.ts) and how many `turns` it has. */
interface Progress {
  version: number;
  turn: number;
}

async function turns(storage: FileStorage, id: string, count: number, from: Progress = { version: 0, turn: 0 }, pad = ''): Promise<Progress> {
  let { version, turn } = from;
  for (let i = 0; i < count; i++) {
    turn += 1;
    const next = await storage.commit(id, { expectedVersion: version, state: { turn, pad }, append: [user(`m${turn}`)] });
    if (version !== 0) assert.equal(next, version + 1, 'one version per commit');
    version = next;
  }
  return { version, turn };
}

const messagesUpTo = (n: number): ChatMessage[] => Array.from({ length: n }, (_, i) => user(`m${i + 1}`));

test('a torn last line (a write cut short by a crash) is dropped on load and cut off before the next append', async (t) => {
  const dir = await tempDir(t);
  const two = await turns(open(t, dir), 'bob', 2);
  await appendFile(journalOf(dir, 'bob'), `{"v":${two.version + 1},"state":{"turn":3},"append":[{"role":"us`);
  const reopened = open(t, dir);
  assert.deepEqual(await reopened.load('bob'), { state: { turn: 2, pad: '' }, messages: messagesUpTo(2), version: two.version });
  assert.equal(await reopened.head('bob'), two.version);
  await turns(reopened, 'bob', 1, two);
  const lines = (await readFile(journalOf(dir, 'bob'), 'utf8')).split('\n');
  assert.equal(lines.pop(), '', 'the file ends with a newline');
  assert.equal(lines.length, 3);
  for (const line of lines) JSON.parse(line); // every line whole again
  assert.deepEqual(await open(t, dir).load('bob'), { state: { turn: 3, pad: '' }, messages: messagesUpTo(3), version: two.version + 1 });
});

test('a garbled last line ending in a newline (zeroes left by a crash) is dropped too', async (t) => {
  const dir = await tempDir(t);
  const { version } = await turns(open(t, dir), 'zed', 3);
  await appendFile(journalOf(dir, 'zed'), '\u0000\u0000\u0000\u0000\n');
  const storage = open(t, dir);
  assert.equal((await storage.load('zed'))?.version, version);
  assert.equal(await storage.commit('zed', { expectedVersion: version, state: {}, append: [] }), version + 1);
  assert.equal((await open(t, dir).load('zed'))?.version, version + 1);
});

test('a bad line before the last one is corruption: load refuses with storage_corrupt rather than skip a turn', async (t) => {
  const dir = await tempDir(t);
  await turns(open(t, dir), 'amy', 3);
  const file = journalOf(dir, 'amy');
  const lines = (await readFile(file, 'utf8')).split('\n');
  lines[1] = '{"v":2,"state":{"turn":2},"app';
  await writeFile(file, lines.join('\n'));
  await assert.rejects(open(t, dir).load('amy'), (error: Error & { code?: string; status?: number }) => {
    assert.equal(error.code, 'storage_corrupt');
    assert.equal(error.status, 500);
    assert.match(error.message, /line 2/);
    return true;
  });
});

test('a journal that names another id is refused, not served under the wrong name', async (t) => {
  const dir = await tempDir(t);
  await turns(open(t, dir), 'alice', 1);
  const copied = journalOf(dir, 'mallory');
  await writeFile(copied, await readFile(journalOf(dir, 'alice')));
  await assert.rejects(open(t, dir).load('mallory'), { code: 'storage_corrupt' });
});

test('compaction rewrites the journal as one snapshot line and keeps every turn', async (t) => {
  const dir = await tempDir(t);
  const storage = open(t, dir);
  const thirty = await turns(storage, 'cal', 30);
  assert.equal((await readFile(journalOf(dir, 'cal'), 'utf8')).split('\n').length, 31);
  assert.equal(await storage.compact('cal'), true);
  const text = await readFile(journalOf(dir, 'cal'), 'utf8');
  assert.equal(text.split('\n').length, 2, 'one line and the final newline');
  const expected = { state: { turn: 30, pad: '' }, messages: messagesUpTo(30), version: thirty.version };
  assert.deepEqual(await storage.load('cal'), expected);
  assert.deepEqual(await open(t, dir).load('cal'), expected);
  // Later turns append after the snapshot as usual.
  await turns(storage, 'cal', 2, thirty);
  assert.deepEqual(await open(t, dir).load('cal'), { state: { turn: 32, pad: '' }, messages: messagesUpTo(32), version: thirty.version + 2 });
  assert.equal(await storage.compact('never-stored'), false);
  assert.deepEqual((await readdir(dir)).filter((name) => name.includes('.tmp')), [], 'no temp file left behind');
});

test('compaction starts on its own once superseded states outweigh the rest of the journal', async (t) => {
  const dir = await tempDir(t);
  const storage = open(t, dir, { compactAfterBytes: 2_000 });
  const pad = 'x'.repeat(500); // big states, small messages: most of the file goes stale
  const forty = await turns(storage, 'big', 40, undefined, pad);
  await storage.close(); // waits for background compaction
  const lines = (await readFile(journalOf(dir, 'big'), 'utf8')).split('\n').length - 1;
  assert.ok(lines < 40, `compaction ran (${lines} lines for 40 turns)`);
  assert.deepEqual(await open(t, dir).load('big'), { state: { turn: 40, pad }, messages: messagesUpTo(40), version: forty.version });
});

test('a journal of small states (mostly framing: {"v":...,"state":{"n":1},"append":[]}) is compacted too, so it does not grow without bound', async (t) => {
  const dir = await tempDir(t);
  const storage = open(t, dir, { compactAfterBytes: 2_000 });
  let version = 0;
  for (let n = 1; n <= 400; n++) version = await storage.commit('tiny', { expectedVersion: version, state: { n }, append: [] });
  await storage.close(); // waits for background compaction
  const size = (await stat(journalOf(dir, 'tiny'))).size;
  // 400 lines of about 45 bytes is 18 KB; compacted as it goes, it never holds much more than the threshold twice.
  assert.ok(size < 4_500, `the journal holds ${size} bytes after 400 state-only turns`);
  assert.deepEqual(await open(t, dir).load('tiny'), { state: { n: 400 }, messages: [], version });
});

test('another instance\'s appends and compactions are seen (tail read, then full re-read)', async (t) => {
  const dir = await tempDir(t);
  const a = open(t, dir);
  const b = open(t, dir);
  const two = await turns(a, 'eve', 2);
  assert.equal(await b.head('eve'), two.version);
  const five = await turns(a, 'eve', 3, two);
  assert.equal(await b.head('eve'), five.version, 'b reads only the appended lines');
  await a.compact('eve');
  assert.equal(await b.head('eve'), five.version, 'b notices the file was replaced');
  await turns(b, 'eve', 1, five);
  assert.equal(await a.head('eve'), five.version + 1);
  await a.delete('eve');
  assert.equal(await b.head('eve'), 0);
  assert.deepEqual(await b.load('eve'), undefined);
});

test('loadSince reads only the lines another instance appended since this one\'s last read, not the history', async (t) => {
  const dir = await tempDir(t);
  const a = open(t, dir);
  const b = open(t, dir);
  const two = await turns(a, 'fay', 2);
  assert.equal((await b.load('fay'))?.version, two.version);
  const four = await turns(a, 'fay', 2, two);
  assert.equal(await b.head('fay'), two.version + 2); // how an agent learns it is behind, right before it asks for the rest
  // Spoil the first line in place (same size, same file): a whole read would now refuse the journal.
  const file = journalOf(dir, 'fay');
  const text = await readFile(file, 'utf8');
  const firstLine = text.indexOf('\n');
  await writeFile(file, 'x'.repeat(firstLine) + text.slice(firstLine));
  assert.deepEqual(await b.loadSince('fay', { version: two.version, messages: 2 }), { state: { turn: 4, pad: '' }, messages: [user('m3'), user('m4')], version: four.version });
  await assert.rejects(b.load('fay'), { code: 'storage_corrupt' }, 'the whole file was not what loadSince read');
});

test('a directory removed under a running storage is made again at the next write', async (t) => {
  const dir = await tempDir(t);
  const storage = open(t, dir);
  await turns(storage, 'gus', 1);
  await rm(dir, { recursive: true, force: true });
  assert.equal(await storage.head('gus'), 0);
  const { version } = await turns(storage, 'gus', 1); // the first commit after the removal succeeds
  assert.equal(await storage.head('gus'), version);
  assert.deepEqual((await storage.load('gus'))?.messages, [user('m1')]);
  await rm(dir, { recursive: true, force: true });
  const unlock = await storage.lock('gus'); // a turn takes the lock first
  await unlock();
});

test('journals are private (directory 0700, files 0600) and a journal that is a symlink is refused, its target untouched', { skip: process.platform === 'win32' ? 'POSIX modes and O_NOFOLLOW' : false }, async (t) => {
  const root = await tempDir(t);
  const dir = path.join(root, 'data');
  const storage = open(t, dir);
  await turns(storage, 'amy', 1);
  assert.equal((await stat(dir)).mode & 0o777, 0o700);
  const journal = path.join(dir, `${journalBaseName('amy')}.jsonl`);
  assert.equal((await stat(journal)).mode & 0o777, 0o600);
  await storage.compact('amy');
  assert.equal((await stat(journal)).mode & 0o777, 0o600, 'a compacted journal too');

  // A link planted under bob's journal name, pointing at a file the process may write.
  const target = path.join(root, 'precious.txt');
  await writeFile(target, 'original');
  await symlink(target, path.join(dir, `${journalBaseName('bob')}.jsonl`));
  await assert.rejects(storage.load('bob'), { code: 'ELOOP' });
  await assert.rejects(turns(storage, 'bob', 1), { code: 'ELOOP' });
  assert.equal(await readFile(target, 'utf8'), 'original');
});

test('ids map to safe, distinct file names: no escape from the directory, no device names, no case collisions', async (t) => {
  const root = await tempDir(t);
  const dir = path.join(root, 'data');
  const ids = [
    '../x', '../../etc/passwd', '..', '.', '', 'a/b', 'a\\b', 'C:\\Windows', 'CON', 'con', 'NUL.txt', 'nul', 'PRN', 'AUX',
    'COM1', 'LPT9.log', 'Bob', 'bob', 'BOB', 'x'.repeat(10_000), `${'x'.repeat(9_999)}y`, 'ünïcödé', '🤖', 'new\nline',
    'nul\u0000byte', '\ud800', '\udc00', 'trailing.', 'trailing ', ' ', '-rf', '.hidden', 'İ', 'i̇', 'ß', 'ss',
  ];
  const names = ids.map(journalBaseName);
  const reserved = /^(con|prn|aux|nul|com[0-9]|lpt[0-9])$/;
  for (const [index, name] of names.entries()) {
    assert.match(name, /^[a-z0-9_]{1,40}-[0-9a-f]{64}$/, `id #${index}`);
    assert.ok(name.length <= 105);
    assert.ok(!reserved.test(name.split('.')[0] as string), `id #${index} gives a DOS device name`);
  }
  assert.equal(new Set(names.map((name) => name.toLowerCase())).size, ids.length, 'distinct even ignoring case');
  assert.equal(journalBaseName('Bob'), journalBaseName('Bob'), 'stable');

  const storage = open(t, dir);
  for (const [index, id] of ids.entries()) await storage.commit(id, { expectedVersion: 0, state: { index }, append: [] });
  assert.deepEqual(await readdir(root), ['data'], 'nothing was written outside the directory');
  const files = await readdir(dir, { withFileTypes: true });
  assert.equal(files.filter((entry) => entry.isFile() && entry.name.endsWith('.jsonl')).length, ids.length);
  assert.ok(files.every((entry) => entry.isFile()), 'no subdirectories');
  for (const [index, id] of ids.entries()) assert.deepEqual((await open(t, dir).load(id))?.state, { index });
});

test('fsync: false still writes every commit (durable against a process crash, not a power cut)', async (t) => {
  const dir = await tempDir(t);
  const { version } = await turns(open(t, dir, { fsync: false }), 'quick', 5);
  assert.deepEqual(await open(t, dir).load('quick'), { state: { turn: 5, pad: '' }, messages: messagesUpTo(5), version });
});

test('a commit whose flush fails (EIO) is answered 503 storage_unavailable and leaves no trace: its written line is taken back', async (t) => {
  const dir = await tempDir(t);
  const url = await serveAgents(t, echoOn(open(t, dir)));
  assert.equal((await postJson(`${url}/fay/chat`, { message: 'kept' })).status, 200);

  // The next flush of any file fails, as a disk reporting an I/O error would.
  const fileHandle = await fileHandlePrototype<{ datasync(): Promise<void> }>(dir);
  t.mock.method(fileHandle, 'datasync', async () => {
    throw flushError();
  }, { times: 1 });
  const failed = await postJson(`${url}/fay/chat`, { message: 'failed' });
  assert.equal(failed.status, 503);
  assert.equal(failed.body.code, 'storage_unavailable');

  assert.equal((await postJson(`${url}/fay/chat`, { message: 'next' })).status, 200);
  const contents = (await open(t, dir).load('fay'))?.messages.map((message) => message.content);
  assert.deepEqual(contents, ['kept', 'kept', 'next', 'next'], 'the failed turn is in no history, this process\'s or a new one\'s');
});

test('a commit refused by the directory\'s permissions (EACCES) stays 500 internal_error: a retry meets it again until they are fixed', async (t) => {
  const dir = await tempDir(t);
  const url = await serveAgents(t, echoOn(open(t, dir)));
  assert.equal((await postJson(`${url}/ida/chat`, { message: 'kept' })).status, 200);
  // Root writes whatever the modes say, so the refusal is made where the disk's failures are.
  const fileHandle = await fileHandlePrototype<{ datasync(): Promise<void> }>(dir);
  t.mock.method(fileHandle, 'datasync', async () => {
    throw Object.assign(new Error('EACCES: permission denied, fdatasync'), { code: 'EACCES' });
  }, { times: 1 });
  const refused = await postJson(`${url}/ida/chat`, { message: 'refused' });
  assert.deepEqual([refused.status, refused.body.code], [500, 'internal_error']);
  assert.equal((await postJson(`${url}/ida/chat`, { message: 'next' })).status, 200);
});

test('another process that read a failed commit\'s line before it was taken back reads on cleanly after a longer line replaced it', async (t) => {
  const dir = await tempDir(t);
  const writer = open(t, dir);
  const reader = open(t, dir);
  const first = await turns(writer, 'gus', 1);
  assert.equal(await reader.head('gus'), first.version);
  const fileHandle = await fileHandlePrototype<{ datasync(): Promise<void> }>(dir);
  let seen: number | undefined;
  t.mock.method(fileHandle, 'datasync', async () => {
    seen = await reader.head('gus'); // between the write and the failed flush: the line is there
    throw flushError();
  }, { times: 1 });
  await assert.rejects(writer.commit('gus', { expectedVersion: first.version, state: {}, append: [user('failed')] }), outage('EIO'));
  assert.equal(seen, first.version + 1);
  // Not that version again: the reader holds it as the failed turn's.
  const after = await writer.head('gus');
  assert.notEqual(after, seen);
  assert.notEqual(after, first.version);
  const next = await writer.commit('gus', { expectedVersion: after, state: { longer: 'x'.repeat(40) }, append: [user('next')] });
  assert.equal(await reader.head('gus'), next, 'not storage_corrupt: the tail it had read up to is gone');
  assert.deepEqual(await reader.loadSince('gus', { version: first.version, messages: 1 }), { state: { longer: 'x'.repeat(40) }, messages: [user('next')], version: next });
  assert.deepEqual((await reader.load('gus'))?.messages, [user('m1'), user('next')]);
});

test('a failed commit does not take back the line of a process that took over its lapsed lease and committed meanwhile, even the very same line', async (t) => {
  // A line of its own, shorter; and the same turn retried there (a deterministic agent writes the same line, byte for byte).
  for (const retried of [false, true]) {
    const dir = await tempDir(t);
    let now = 1_000_000;
    const clock = (): number => now;
    const stalled = open(t, dir, { now: clock, renewLease: false });
    const other = open(t, dir, { now: clock });
    const first = await turns(stalled, 'hal', 1);
    const unlock = await stalled.lock('hal');
    const fileHandle = await fileHandlePrototype<{ write(...args: unknown[]): Promise<unknown> }>(dir);
    const write = fileHandle.write;
    let stall = true;
    let committed: number | undefined;
    const turn = { expectedVersion: first.version, state: {}, append: [user('kept')] };
    t.mock.method(fileHandle, 'write', async function (this: unknown, ...args: unknown[]) {
      if (!stall) return write.apply(this, args);
      stall = false;
      // The stalled process's lease runs out before its write: the other takes the lock and commits a
      // line no longer than the stalled one's; then the stalled write fails, the disk full.
      now += 31_000;
      const release = await other.lock('hal');
      committed = await other.commit('hal', turn);
      await release();
      throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
    });
    const failed = retried ? turn : { expectedVersion: first.version, state: { pad: 'x'.repeat(100) }, append: [user('failed')] };
    await assert.rejects(stalled.commit('hal', failed), outage('ENOSPC'));
    await unlock();
    t.mock.restoreAll();
    assert.equal(committed, first.version + 1);
    const stored = await open(t, dir).load('hal');
    assert.deepEqual(stored, { state: {}, messages: [user('m1'), user('kept')], version: committed }, `the other process's acknowledged turn is kept (retried: ${retried})`);
  }
});

test('a failed commit that another process read before it was taken back does not come back there: that process does not build on it over later turns', async (t) => {
  // 1: only the commit's flush fails; 2: the journal's rewrite after it too (the disk still failing).
  for (const failures of [1, 2]) {
    const dir = await tempDir(t);
    // Two processes on one directory: each its own storage and router.
    const serve = (): Promise<string> => serveAgents(t, counterOn(open(t, dir)));
    const [a, b] = [await serve(), await serve()];
    assert.equal((await postJson(`${a}/cal/invoke`, { method: 'increment' })).body.result, 1);
    const fileHandle = await fileHandlePrototype<{ datasync(): Promise<void> }>(dir);
    let seen: unknown;
    const flush = t.mock.method(fileHandle, 'datasync', async () => {
      // Between the commit's write and its failed flush, the other process reads the line.
      if (flush.mock.callCount() === 0) seen = (await getJson(`${b}/cal/state`)).body.state;
      throw flushError();
    }, { times: failures });
    assert.equal((await postJson(`${a}/cal/invoke`, { method: 'increment' })).status, 503);
    assert.equal(flush.mock.callCount(), failures);
    flush.mock.restore();
    assert.deepEqual(seen, { count: 2 }, `${failures}`);
    assert.equal((await postJson(`${a}/cal/invoke`, { method: 'increment', params: { by: 10 } })).body.result, 11, `${failures}`);
    assert.deepEqual((await getJson(`${b}/cal/state`)).body.state, { count: 11 }, `${failures}`);
    assert.equal((await postJson(`${b}/cal/invoke`, { method: 'increment' })).body.result, 12, `${failures}`);
    assert.deepEqual((await getJson(`${a}/cal/state`)).body.state, { count: 12 }, `${failures}`);
  }
});

test('a lock that cannot be written (disk full) fails the operation with the error and leaves no temp file behind', async (t) => {
  const dir = await tempDir(t);
  const storage = open(t, dir);
  await storage.head('ned'); // the directory exists
  const realWriteFile = fsPromises.writeFile;
  // The disk fills as the lock file is written aside: created, then ENOSPC.
  t.mock.method(fsPromises, 'writeFile', async (file: string, data: string, options: { flag?: string }) => {
    if (!String(file).endsWith('.new')) return realWriteFile(file, data, options);
    await realWriteFile(file, '', options);
    throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
  });
  syncBuiltinESMExports(); // the named import in file-lock.ts follows the mock
  t.after(() => {
    t.mock.restoreAll();
    syncBuiltinESMExports();
  });
  await assert.rejects(storage.lock('ned'), outage('ENOSPC'));
  await assert.rejects(storage.commit('ned', { expectedVersion: 0, state: {}, append: [] }), outage('ENOSPC'));
  assert.deepEqual(await readdir(dir), []);
});

test('a commit without lock() waits for another holder of the lock file, then checks the version', async (t) => {
  const dir = await tempDir(t);
  const holder = open(t, dir);
  const writer = open(t, dir);
  const one = await turns(holder, 'kim', 1);
  const unlock = await holder.lock('kim');
  const events: string[] = [];
  const late = writer.commit('kim', { expectedVersion: one.version, state: {}, append: [user('writer')] }).then(
    () => events.push('writer committed'),
    (error: unknown) => events.push(`writer refused: ${(error as { code?: string }).code}`),
  );
  await turns(holder, 'kim', 1, one);
  events.push('holder unlocks');
  await unlock();
  await late;
  assert.deepEqual(events, ['holder unlocks', 'writer refused: version_conflict']);
  assert.equal(await writer.head('kim'), one.version + 1);
});

test('a lock file left by a dead process on this host is taken at once, whatever its expiry', async (t) => {
  const dir = await tempDir(t);
  const storage = open(t, dir);
  await storage.commit('ann', {expectedVersion: 0, state: {}, append: [] });
  const dead = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
  const pid = Number(dead.stdout);
  assert.ok(pid > 0);
  await writeFile(lockOf(dir, 'ann'), JSON.stringify({ pid, host: hostname(), token: 'ghost', expires: Date.now() + 3_600_000 }));
  const unlock = await storage.lock('ann', AbortSignal.timeout(20_000));
  const lockFile = JSON.parse(await readFile(lockOf(dir, 'ann'), 'utf8')) as { pid: number; token: string };
  assert.equal(lockFile.pid, process.pid);
  assert.notEqual(lockFile.token, 'ghost');
  await unlock();
  assert.deepEqual((await readdir(dir)).filter((name) => !name.endsWith('.jsonl')), [], 'lock file and takeover leftovers removed');
});

test('a lock file with this process\'s pid written by an earlier process (a container restarted as PID 1) is taken at once', async (t) => {
  const dir = await tempDir(t);
  const storage = open(t, dir);
  await storage.commit('cai', { expectedVersion: 0, state: {}, append: [] });
  // An earlier process's start time (the run written by this one is this process's).
  await writeFile(lockOf(dir, 'cai'), JSON.stringify({ pid: process.pid, host: hostname(), run: '1', token: 'ghost', expires: Date.now() + 3_600_000 }));
  const unlock = await storage.lock('cai', AbortSignal.timeout(20_000));
  const written = JSON.parse(await readFile(lockOf(dir, 'cai'), 'utf8')) as { token: string; run: string };
  assert.notEqual(written.token, 'ghost');
  assert.match(written.run, /^\d+$/, "the run is this process's start time");
  await unlock();
  // This process's own lock, through another FileStorage on the same directory, is still waited on...
  const holder = await storage.lock('cai');
  await assert.rejects(open(t, dir).lock('cai', AbortSignal.timeout(300)), { name: 'TimeoutError' });
  // ...and from a worker thread, which has this pid and loads its own copy of the module.
  // This file runs from source through tsx, or compiled (npm test): the worker loads the module the same way
  // (a worker gets no --import from its options, so it registers tsx itself).
  const fromSource = import.meta.url.endsWith('.ts');
  const module = new URL(`../../src/storage/file.${fromSource ? 'ts' : 'js'}`, import.meta.url).href;
  const tsx = fromSource ? `(await import(${JSON.stringify(import.meta.resolve('tsx/esm/api'))})).register();` : '';
  const worker = new Worker(
    `(async () => { ${tsx} return import(${JSON.stringify(module)}); })().then(async ({ FileStorage }) => {
      const { parentPort, workerData } = await import('node:worker_threads');
      const outcome = await new FileStorage(workerData).lock('cai', AbortSignal.timeout(300)).then(() => 'took the held lock', (error) => error.name);
      parentPort.postMessage(outcome);
    })`,
    { eval: true, workerData: dir },
  );
  const [outcome] = (await once(worker, 'message')) as [string];
  await worker.terminate();
  assert.equal(outcome, 'TimeoutError', 'a worker thread waits on a lock its process holds');
  await holder();
});

test('temp files a killed process left (a lock\'s, a compaction snapshot) are swept at first use once a minute old, and an id\'s snapshots by its delete', async (t) => {
  const dir = await tempDir(t);
  await turns(open(t, dir), 'dee', 2);
  await turns(open(t, dir), 'eve', 1);
  const base = (id: string): string => path.basename(journalOf(dir, id), '.jsonl');
  const old = new Date(Date.now() - 120_000);
  const leftovers = {
    oldLock: `${base('dee')}.lock.${randomUUID()}.new`,
    oldRenew: `${base('dee')}.lock.${randomUUID()}.renew`,
    oldStale: `${base('eve')}.lock.${randomUUID()}.stale`,
    oldSnapshot: `${base('eve')}.jsonl.${randomUUID()}.tmp`,
    freshLock: `${base('dee')}.lock.${randomUUID()}.new`, // a live process may be about to link it
    freshSnapshot: `${base('dee')}.jsonl.${randomUUID()}.tmp`,
  };
  for (const [what, name] of Object.entries(leftovers)) {
    await writeFile(path.join(dir, name), '{"state":{"secret":1}}');
    if (what.startsWith('old')) await utimes(path.join(dir, name), old, old);
  }
  const mine = 'notes.txt.tmp';
  await writeFile(path.join(dir, mine), 'not ours');
  await utimes(path.join(dir, mine), old, old);

  const storage = open(t, dir);
  assert.equal((await storage.load('dee'))?.state['turn'], 2, 'the journals are untouched');
  assert.deepEqual((await readdir(dir)).filter((name) => !name.endsWith('.jsonl')).sort(), [leftovers.freshLock, leftovers.freshSnapshot, mine].sort());

  await storage.delete('dee');
  assert.deepEqual((await readdir(dir)).filter((name) => !name.endsWith('.jsonl')).sort(), [leftovers.freshLock, mine].sort(), "delete takes the id's snapshot with it, whatever its age");
  assert.equal((await storage.load('eve'))?.version !== undefined, true);
});

test('a live holder\'s lock file, or a half-written one, is waited on; an abort ends the wait', async (t) => {
  const dir = await tempDir(t);
  const storage = open(t, dir);
  await writeFile(lockOf(dir, 'bea'), JSON.stringify({ pid: process.pid, host: 'another-host', token: 'alive', expires: Date.now() + 3_600_000 }));
  const controller = new AbortController();
  const waiting = storage.lock('bea', controller.signal);
  controller.abort(new Error('gave up'));
  await assert.rejects(waiting, /gave up/);
  await writeFile(lockOf(dir, 'bea'), ''); // made just now: its owner is between open and write
  await assert.rejects(storage.lock('bea', AbortSignal.abort(new Error('again'))), /again/);
  const second = new AbortController();
  const stillWaiting = storage.lock('bea', second.signal);
  second.abort(new Error('empty lock file is honoured'));
  await assert.rejects(stillWaiting, /empty lock file is honoured/);
});

test('an unreadable lock file is honoured for a lease from its mtime, then taken over', async (t) => {
  const dir = await tempDir(t);
  const storage = open(t, dir);
  const lockFile = lockOf(dir, 'old');
  await writeFile(lockFile, 'not json');
  const longAgo = new Date(Date.now() - 3_600_000);
  await utimes(lockFile, longAgo, longAgo);
  const unlock = await storage.lock('old', AbortSignal.timeout(20_000));
  assert.equal(typeof (JSON.parse(await readFile(lockFile, 'utf8')) as { token: unknown }).token, 'string');
  await unlock();
});

test('a held lease is renewed, so it outlives its first expiry; unrenewed it lapses and is taken over', async (t) => {
  mock.timers.enable({ apis: ['setInterval'] });
  t.after(() => mock.timers.reset());
  const dir = await tempDir(t);
  let now = 1_000_000;
  const clock = (): number => now;
  const holder = open(t, dir, { now: clock, leaseSeconds: 30 });
  const other = open(t, dir, { now: clock, leaseSeconds: 30 });
  const unlock = await holder.lock('ren');
  const expiry = async (): Promise<number> => (JSON.parse(await readFile(lockOf(dir, 'ren'), 'utf8')) as { expires: number }).expires;
  assert.equal(await expiry(), 1_030_000);
  now += 20_000;
  mock.timers.tick(10_000); // the renewal timer (a third of the lease)
  for (let i = 0; i < 200 && (await expiry()) === 1_030_000; i++) await new Promise((resolve) => setImmediate(resolve));
  assert.equal(await expiry(), 1_050_000, 'renewed to now + lease');
  now += 20_000; // past the first expiry, within the renewed one
  const events: string[] = [];
  const taken = other.lock('ren', AbortSignal.timeout(20_000)).then((release) => {
    events.push('other locked');
    return release;
  });
  await holder.commit('ren', { expectedVersion: 0, state: { by: 'holder' }, append: [] });
  events.push('holder unlocks');
  await unlock();
  await (await taken)();
  assert.deepEqual(events, ['holder unlocks', 'other locked']);

  const dying = open(t, dir, { now: clock, leaseSeconds: 30, renewLease: false });
  await dying.lock('ren');
  mock.timers.tick(60_000); // no renewal timer to fire
  now += 31_000;
  await (await other.lock('ren', AbortSignal.timeout(20_000)))();
});

test('two lock() calls on one instance queue in the process; an abort leaves the queue', async (t) => {
  const dir = await tempDir(t);
  const storage = open(t, dir);
  const first = await storage.lock('q');
  const controller = new AbortController();
  const aborted = storage.lock('q', controller.signal);
  const events: string[] = [];
  const second = storage.lock('q').then((release) => {
    events.push('second locked');
    return release;
  });
  controller.abort(new Error('left the queue'));
  await assert.rejects(aborted, /left the queue/);
  events.push('first unlocks');
  await first();
  await (await second)();
  assert.deepEqual(events, ['first unlocks', 'second locked']);
});

test('close() releases held locks; bad options and bad turns are refused with a fix', async (t) => {
  const dir = await tempDir(t);
  const storage = new FileStorage(dir);
  await storage.lock('held');
  await storage.close();
  assert.deepEqual(await readdir(dir), []);
  assert.throws(() => new FileStorage(''), /directory path/);
  assert.throws(() => new FileStorage(dir, { leaseSeconds: 0 }), /leaseSeconds must be a positive number/);
  assert.throws(() => new FileStorage(dir, { compactAfterBytes: -1 }), /compactAfterBytes/);
  const live = open(t, dir);
  await assert.rejects(live.commit('x', { expectedVersion: -1, state: {}, append: [] }), TypeError);
  await assert.rejects(live.commit('x', { expectedVersion: 0, state: [] as never, append: [] }), /plain object/);
  await assert.rejects(live.commit('x', { expectedVersion: 0, state: {}, append: 'no' as never }), /append must be an array/);
  await assert.rejects(live.commit('x', null as never), TypeError);
  await assert.rejects(live.load(42 as never), /agent id must be a string/);
});
