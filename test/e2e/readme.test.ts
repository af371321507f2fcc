import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { freePort, runExample } from '../helpers/readme-example.ts';

const root = process.cwd();
const readme = readFileSync(path.join(root, 'README.md'), 'utf8');

/** The fenced blocks of one README section, in order. */
function blocks(section: string): Array<{ lang: string; code: string }> {
  const start = readme.indexOf(`\n## ${section}\n`);
  assert.notEqual(start, -1, `README has a "## ${section}" section`);
  const end = readme.indexOf('\n## ', start + 1);
  const text = readme.slice(start, end === -1 ? undefined : end);
  return [...text.matchAll(/```(\w+)\n([\s\S]*?)```/g)].map((m) => ({ lang: m[1] ?? '', code: m[2] ?? '' }));
}

/** Turn ids are random: the README shows one where the server prints its own, so both read as the same placeholder. */
const anyTurnId = (text: string | undefined) => text?.replace(/\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/g, '<turn id>');

test('the README quick start runs as pasted, and its curl lines print what the README says', async (t) => {
  const [js, sh, stream] = blocks('Quick start');
  assert.equal(js?.lang, 'js');
  assert.equal(sh?.lang, 'sh');
  assert.equal(stream?.lang, 'text');
  const port = await freePort();
  await runExample(t, (js?.code ?? '').replaceAll('8000', String(port)), port);

  const lines = (sh?.code ?? '').trim().split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string;
    if (line.startsWith('#')) continue;
    const { stdout } = await promisify(execFile)('bash', ['-c', line.replaceAll('8000', String(port))]);
    const expected = lines[i + 1]?.startsWith('# ') ? lines[i + 1]?.slice(2) : undefined;
    if (expected !== undefined) assert.equal(anyTurnId(stdout.trim()), anyTurnId(expected), line);
    else assert.equal(anyTurnId(stdout), anyTurnId(stream?.code), line);
  }
});
