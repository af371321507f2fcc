import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';

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

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

test('the README quick start runs as pasted, and its curl lines print what the README says', async (t) => {
  const [js, sh] = blocks('Quick start');
  assert.equal(js?.lang, 'js');
  assert.equal(sh?.lang, 'sh');
  const port = await freePort();
  // An installed agent-router, as a user's project has it (the build in dist/ is what gets published).
  const project = mkdtempSync(path.join(tmpdir(), 'agent-router-readme-'));
  t.after(() => rmSync(project, { recursive: true, force: true }));
  mkdirSync(path.join(project, 'node_modules'));
  symlinkSync(root, path.join(project, 'node_modules', 'agent-router'), 'dir');
  writeFileSync(path.join(project, 'server.mjs'), (js?.code ?? '').replaceAll('8000', String(port)));

  const child = spawn(process.execPath, ['server.mjs'], { cwd: project, stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => child.kill());
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  for (let i = 0; i < 100; i++) {
    const up = await new Promise<boolean>((resolve) => {
      const socket = net.connect(port, '127.0.0.1', () => resolve(socket.end() !== undefined)).on('error', () => resolve(false));
    });
    if (up) break;
    assert.equal(child.exitCode, null, `server.mjs exited: ${stderr}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }

  const lines = (sh?.code ?? '').trim().split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string;
    if (line.startsWith('#')) continue;
    const { stdout } = await promisify(execFile)('bash', ['-c', line.replaceAll('8000', String(port))]);
    const expected = lines[i + 1]?.startsWith('# ') ? lines[i + 1]?.slice(2) : undefined;
    if (expected !== undefined) assert.equal(stdout.trim(), expected, line);
    else assert.match(stdout, /^data: hi\n\ndata:  there\n\nevent: done\ndata: \[DONE\]\n\n$/, line);
  }
});
