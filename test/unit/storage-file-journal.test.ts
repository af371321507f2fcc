/**
 * The journal format on its own (no disk): how lines are read, which are
 * dropped as torn, which are ignored as fenced-out writes, which are
 * corruption.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { commitLine, scanJournal, snapshotLine } from '../../src/storage/file-journal.ts';
import type { ParsedJournal } from '../../src/storage/file-journal.ts';

const line = (id: string | undefined, v: number, state: object, append: object[] = []): string =>
  commitLine(id, v, JSON.stringify(state), append as never);
const scan = (text: string, collect = true) => scanJournal(Buffer.from(text), { agentId: 'a', file: 'a.jsonl', collect });

test('commit lines: the first names the id, each is one line however many newlines its text holds', () => {
  const first = line('a', 1, { s: 'x\ny' }, [{ role: 'user', content: 'multi\nline\r\n' }]);
  assert.equal(first.split('\n').length, 2);
  assert.deepEqual(JSON.parse(first), { id: 'a', v: 1, state: { s: 'x\ny' }, append: [{ role: 'user', content: 'multi\nline\r\n' }] });
  assert.deepEqual(JSON.parse(line(undefined, 2, {})), { v: 2, state: {}, append: [] });
});

test('a line whose version does not follow (a fenced-out writer\'s) is ignored and counted as stale', () => {
  const text = line('a', 1, { n: 1 }, [{ role: 'user', content: 'one' }])
    + line(undefined, 2, { n: 2 }, [{ role: 'user', content: 'two' }])
    + line(undefined, 2, { n: 99 }, [{ role: 'user', content: 'duplicate' }])
    + line(undefined, 3, { n: 3 });
  const journal = scan(text) as ParsedJournal;
  assert.equal(journal.version, 3);
  assert.deepEqual(journal.state, { n: 3 });
  assert.deepEqual(journal.messages.map((m) => m.content), ['one', 'two']);
  assert.equal(journal.validBytes, Buffer.byteLength(text));
  assert.ok(journal.staleBytes > Buffer.byteLength(line(undefined, 2, { n: 99 }, [{ role: 'user', content: 'duplicate' }])));
});

test('a snapshot line starts the history over; only the first line may be one', () => {
  const snapshot = snapshotLine('a', { version: 7, state: { s: 1 }, messages: [{ role: 'user', content: 'old' }], validBytes: 0, stateBytes: 0, staleBytes: 0 });
  const journal = scan(snapshot + line(undefined, 8, { s: 2 }, [{ role: 'assistant', content: 'new' }])) as ParsedJournal;
  assert.equal(journal.version, 8);
  assert.deepEqual(journal.messages.map((m) => m.content), ['old', 'new']);
  assert.throws(() => scan(line('a', 1, {}) + snapshot + line(undefined, 8, {})), { code: 'storage_corrupt' });
  assert.throws(() => scan(line('a', 1, {}) + line(undefined, 2, {}).replace('"append"', '"messages"') + line(undefined, 3, {})), { code: 'storage_corrupt' });
});

test('a tail read that meets a snapshot, or a line it cannot take, reports the file replaced (undefined), so the caller reads it whole', () => {
  const first = line('a', 1, {});
  const from = scan(first, false) as ParsedJournal;
  const snapshot = snapshotLine('a', { ...from, state: {}, messages: [] });
  assert.equal(scanJournal(Buffer.from(snapshot), { agentId: 'a', file: 'a.jsonl', from }), undefined);
  const tail = scanJournal(Buffer.from(line(undefined, 2, { t: 1 })), { agentId: 'a', file: 'a.jsonl', from });
  assert.equal(tail?.version, 2);
  assert.equal(tail?.validBytes, Buffer.byteLength(first) + Buffer.byteLength(line(undefined, 2, { t: 1 })));
  // The whole read reports real damage (see the corruption tests); a tail may start mid-line of a rewritten file.
  assert.equal(scanJournal(Buffer.from(`garbage\n${line(undefined, 2, {})}`), { agentId: 'a', file: 'a.jsonl', from }), undefined);
});

test('lines that are JSON but not journal entries are corruption, the last one too; a last line with NUL bytes is a torn write', () => {
  const good = line('a', 1, {});
  for (const bad of ['[]', 'null', '{"v":0,"state":{},"append":[]}', '{"v":2,"state":[],"append":[]}', '{"v":2,"state":{}}',
    '{"v":2,"state":{},"append":[],"messages":[]}', '{"v":1.5,"state":{},"append":[]}', '{"V":2,"state":{},"append":[]}', '{"v":2,"state":{},"app',
    '{"v":2,"state":{},"append":[42]}', '{"v":2,"state":{},"append":[null]}', '{"v":2,"state":{},"append":[{"role":"user"}]}']) {
    assert.throws(() => scan(`${good}${bad}\n${line(undefined, 2, {})}`), { code: 'storage_corrupt' }, bad);
    // A complete line was written whole and acknowledged: dropping it would lose a turn without a word.
    assert.throws(() => scan(`${good}${bad}\n`), { code: 'storage_corrupt' }, `${bad} as the last line`);
  }
  for (const torn of ['\u0000\u0000\u0000', '\u0000\u0000":{},"append":[]}', '{"v":2,"st\u0000\u0000\u0000\u0000']) {
    assert.equal(scan(`${good}${torn}\n`)?.version, 1, `${JSON.stringify(torn)} as the last line is a torn write`);
  }
  assert.equal(scan('')?.version, 0);
  assert.equal(scan('{"id":"a","v":1,')?.version, 0, 'a torn first line leaves an empty journal');
});
