/**
 * Installs the package as a user would, into a scratch project: from a
 * `git+file://` URL of a clone (npm runs `prepare`, which builds dist/) and
 * from an `npm pack` tarball; then imports it as ESM and with `require`,
 * type-checks a .ts file against it, and runs `npx agent-router --help`.
 * The clone is of HEAD: commit before running this file by hand.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test, type TestContext } from 'node:test';
import { promisify } from 'node:util';

const root = process.cwd();
const run = promisify(execFile);
// Offline first: the dev dependencies npm installs to run `prepare` come from the cache `npm ci` filled.
const npmFlags = ['--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'];

const USE = `import { AgentRouter, AgentRegistry, AgentServer, Agent, echoModel } from 'agent-router';
import { toExpress } from 'agent-router/express';
class Bot extends Agent<{ n: number }> {
  constructor(id: string) { super(id, { model: echoModel(), initialState: { n: 0 } }); }
}
const registry = new AgentRegistry();
registry.register('bot-[0-9]+', Bot);
const middleware = toExpress(new AgentRouter(registry));
const server = new AgentServer(registry);
const { port, url }: { port: number; url: string } = await server.serve(0);
await server.close();
export { middleware, port, url };
`;

function project(t: TestContext, name: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), `agent-router-install-${name}-`));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: `scratch-${name}`, private: true, type: 'module' }));
  return dir;
}

async function usesIt(dir: string): Promise<void> {
  const esm = await run(process.execPath, ['--input-type=module', '-e', "const m = await import('agent-router'); console.log(typeof m.AgentRouter, typeof (await import('agent-router/fastify')).toFastify)"], { cwd: dir });
  assert.equal(esm.stdout.trim(), 'function function');
  const cjs = await run(process.execPath, ['--no-warnings', '-e', "console.log(typeof require('agent-router').AgentServer)"], { cwd: dir });
  assert.equal(cjs.stdout.trim(), 'function');

  mkdirSync(path.join(dir, 'node_modules', '@types'), { recursive: true });
  symlinkSync(path.join(root, 'node_modules', '@types', 'node'), path.join(dir, 'node_modules', '@types', 'node'), 'dir');
  writeFileSync(path.join(dir, 'use.ts'), USE);
  writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions: { module: 'nodenext', target: 'es2022', strict: true, noEmit: true, types: ['node'], skipLibCheck: false }, files: ['use.ts'] }));
  const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');  // the repository's, shared rather than installed again
  await run(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: dir }).catch((error: { stdout?: string }) => assert.fail(`tsc against the installed package: ${error.stdout}`));

  const help = await run('npx', ['--no-install', 'agent-router', '--help'], { cwd: dir });
  assert.match(help.stdout, /^Usage: agent-router serve/m);
}

test('installed from a git+file:// URL of a clone: prepare builds dist/, and it imports, type-checks and runs', { timeout: 240_000 }, async (t) => {
  const scratch = mkdtempSync(path.join(tmpdir(), 'agent-router-clone-'));
  t.after(() => rmSync(scratch, { recursive: true, force: true }));
  await run('git', ['clone', '--quiet', root, path.join(scratch, 'agent-router')]);
  const dir = project(t, 'git');
  await run('npm', ['install', ...npmFlags, `git+file://${path.join(scratch, 'agent-router')}`], { cwd: dir, maxBuffer: 16 << 20 });
  assert.ok(readdirSync(path.join(dir, 'node_modules', 'agent-router', 'dist')).includes('index.js'));
  await usesIt(dir);
});

test('installed from an npm pack tarball: ships dist/, docs/ and no benchmark history, and it imports, type-checks and runs', { timeout: 120_000 }, async (t) => {
  const scratch = mkdtempSync(path.join(tmpdir(), 'agent-router-pack-'));
  t.after(() => rmSync(scratch, { recursive: true, force: true }));
  // Packed from a clone (its prepare builds the clone's dist/), so the dist/ other tests run against is never rebuilt under them.
  const clone = path.join(scratch, 'agent-router');
  await run('git', ['clone', '--quiet', root, clone]);
  symlinkSync(path.join(root, 'node_modules'), path.join(clone, 'node_modules'), 'dir');
  const { stdout } = await run('npm', ['pack', '--json', '--loglevel=error', '--pack-destination', scratch], { cwd: clone, maxBuffer: 16 << 20 });
  const [packed] = JSON.parse(stdout) as Array<{ filename: string; files: Array<{ path: string }> }>;
  const files = packed?.files.map((f) => f.path) ?? [];
  for (const shipped of ['dist/index.js', 'dist/index.d.ts', 'README.md', 'LICENSE', 'SECURITY.md', 'docs/README.md', 'examples/node-http.mjs']) assert.ok(files.includes(shipped), shipped);
  assert.ok(!files.includes('BENCHMARKS.md') && !files.some((f) => f.startsWith('test/')), 'no benchmarks or tests in the package');
  const dir = project(t, 'tarball');
  await run('npm', ['install', ...npmFlags, path.join(scratch, packed?.filename ?? '')], { cwd: dir });
  await usesIt(dir);
});
