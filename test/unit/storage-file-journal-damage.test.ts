/**
 * A FileStorage journal damaged before its last line (a block of zeroes a
 * crash or a disk left, garbage, an empty line) is storage_corrupt on every
 * read and write, never a shorter history; only a torn last line is dropped.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test, type TestContext } from 'node:test';
import { FileStorage } from '../../src/storage/file.ts';
import { journalBaseName } from '../../src/storage/file-names.ts';

async function tempDir(t: TestContext): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'agent-router-journal-damage-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

function open(t: TestContext, dir: string): FileStorage {
  const storage = new FileStorage(dir, { fsync: false });
  t.after(() => storage.close());
  return storage;
}

/** Four turns, one message each; resolves with the journal's path and its version. */
async function fourTurns(t: TestContext, dir: string, id: string): Promise<{ file: string; version: number }> {
  const storage = open(t, dir);
  let version = 0;
  for (let turn = 1; turn <= 4; turn++) {
    version = await storage.commit(id, { expectedVersion: version, state: { turn }, append: [{ role: 'user', content: `m${turn}` }] });
  }
  return { file: path.join(dir, `${journalBaseName(id)}.jsonl`), version };
}

const corrupt = (line: number) => (error: Error & { code?: string; status?: number }): boolean => {
  assert.equal(error.code, 'storage_corrupt');
  assert.equal(error.status, 500);
  assert.match(error.message, new RegExp(`line ${line} `));
  return true;
};

/** What the second line is turned into, in place or before it; `line`: the damaged line's number. */
const damages: Array<[string, (lines: string[]) => void, number]> = [
  ['the second line zeroed in place (same length)', (lines) => (lines[1] = '\u0000'.repeat(lines[1]!.length)), 2],
  ['a line of NUL bytes inserted before the second', (lines) => lines.splice(1, 0, '\u0000'.repeat(64)), 2],
  ['the second line starting with zeroes (a block of its start unwritten)', (lines) => (lines[1] = '\u0000'.repeat(8) + lines[1]!.slice(8)), 2],
  ['a garbage line inserted before the third', (lines) => lines.splice(2, 0, 'garbage'), 3],
  ['an empty line inserted before the third', (lines) => lines.splice(2, 0, ''), 3],
  ['the third line cut short, the rest kept', (lines) => (lines[2] = lines[2]!.slice(0, 20)), 3],
];

for (const [name, damage, line] of damages) {
  test(`a journal damaged in the middle (${name}) is storage_corrupt for load, head and commit, not a shorter history`, async (t) => {
    const dir = await tempDir(t);
    const { file, version } = await fourTurns(t, dir, 'ann');
    const lines = (await readFile(file, 'utf8')).split('\n');
    assert.equal(lines.pop(), '');
    damage(lines);
    await writeFile(file, `${lines.join('\n')}\n`);
    const before = await readFile(file);

    const storage = open(t, dir);
    await assert.rejects(storage.load('ann'), corrupt(line));
    await assert.rejects(storage.head('ann'), corrupt(line));
    await assert.rejects(storage.commit('ann', { expectedVersion: version, state: { turn: 5 }, append: [{ role: 'user', content: 'm5' }] }), corrupt(line));
    await assert.rejects(storage.loadSince('ann', { version: 0, messages: 0 }), corrupt(line));
    assert.deepEqual(await readFile(file), before, 'nothing was cut off or appended');
  });
}

test('a storage that read the journal whole before the damage reports it at the next whole read, not a shorter history', async (t) => {
  const dir = await tempDir(t);
  const { file } = await fourTurns(t, dir, 'bea');
  const storage = open(t, dir);
  assert.equal((await storage.load('bea'))?.messages.length, 4);
  const lines = (await readFile(file, 'utf8')).split('\n');
  lines[1] = '\u0000'.repeat(lines[1]!.length);
  await writeFile(file, lines.join('\n'));
  await assert.rejects(open(t, dir).load('bea'), corrupt(2));
  await assert.rejects(storage.load('bea'), corrupt(2));
});

test('only a torn last line is dropped: NUL bytes or a line cut short at the end load as the turns before it', async (t) => {
  for (const torn of ['\u0000'.repeat(40), '\u0000'.repeat(8) + '"state":{"turn":5},"append":[]}', '{"v":99,"state":{"tu']) {
    const dir = await tempDir(t);
    const { file, version } = await fourTurns(t, dir, 'cy');
    await writeFile(file, `${await readFile(file, 'utf8')}${torn}${torn.startsWith('{') ? '' : '\n'}`);
    const storage = open(t, dir);
    const record = await storage.load('cy');
    assert.equal(record?.version, version, JSON.stringify(torn));
    assert.deepEqual(record?.messages.map((m) => m.content), ['m1', 'm2', 'm3', 'm4']);
    // The next commit cuts the torn line off and follows the last whole one.
    assert.equal(await storage.commit('cy', { expectedVersion: version, state: { turn: 5 }, append: [{ role: 'user', content: 'm5' }] }), version + 1);
    assert.deepEqual((await open(t, dir).load('cy'))?.messages.map((m) => m.content), ['m1', 'm2', 'm3', 'm4', 'm5']);
  }
});
