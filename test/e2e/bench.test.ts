import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'node:test';

/** The part of `npm run bench -- --json=FILE` this test reads. */
interface BenchJson {
  scenarios: Array<{
    id: string;
    title: string;
    required: string[];
    rows: Array<{ contender: string; cells: Record<string, number | string | null> }>;
  }>;
}

const SCENARIOS = ['chat', 'state', 'sse', 'latency', 'streams', 'agents', 'proxy'];

function run(args: string[], script = 'scripts/bench/index.ts'): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const env = { ...process.env };
  // Under `npm test` c8 sets this; the bench's children have nothing to report and would only run slower.
  delete env['NODE_V8_COVERAGE'];
  const child = spawn(process.execPath, ['--import', 'tsx', script, ...args], { cwd: process.cwd(), env });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (text: string) => (stdout += text));
  child.stderr.setEncoding('utf8').on('data', (text: string) => (stderr += text));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

test('npm run bench -- --quick runs every scenario and every contender produces numbers', { timeout: 180_000 }, async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bench-test-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'bench.json');
  const { code, stdout, stderr } = await run(['--quick', `--json=${file}`]);
  assert.equal(code, 0, `bench --quick exited ${code}\n${stderr}`);
  const report = JSON.parse(readFileSync(file, 'utf8')) as BenchJson;
  assert.deepEqual(report.scenarios.map((scenario) => scenario.id), SCENARIOS);
  for (const scenario of report.scenarios) {
    assert.ok(scenario.rows.length > 0, `${scenario.id}: no rows`);
    for (const row of scenario.rows) {
      for (const key of scenario.required) {
        const value = row.cells[key];
        // JSON turns NaN into null: a missing measurement fails here with the contender's reason.
        assert.ok(typeof value === 'number' && Number.isFinite(value), `${scenario.id} / ${row.contender}: ${key} is ${JSON.stringify(value)}\n${stderr}`);
      }
    }
  }
  // The markdown report names every scenario, and its ratios next to the ceiling.
  for (const scenario of report.scenarios) assert.ok(stdout.includes(`### ${scenario.title}`), `report lacks "${scenario.title}"`);
  assert.match(stdout, /bare node:http/);
});

test('npm run bench refuses unknown options with its usage', async () => {
  const { code, stderr } = await run(['--quick', '--frobnicate']);
  assert.equal(code, 2);
  assert.match(stderr, /unknown option --frobnicate/);
  assert.match(stderr, /Usage: npm run bench/);
});

test('npm run bench refuses a count that rounds to 0 (it would run no round, no sample)', async () => {
  for (const flag of ['--rounds=0.4', '--samples=0.2']) {
    const { code, stderr } = await run([flag]);
    assert.equal(code, 2, `${flag}: exited ${code}\n${stderr}`);
    assert.match(stderr, /must be a whole number above 0/);
  }
});

test('npm run bench refuses a --runner it does not know and a --json or --markdown without a file', async () => {
  for (const [flag, message] of [['--runner=tsc', /--runner takes build or tsx/], ['--json', /--json needs a file/], ['--markdown=', /--markdown needs a file/]] as const) {
    // A small run if the flag were accepted after all, so a regression costs seconds, not the full bench.
    const { code, stderr } = await run(['--quick', '--only=agents', '--agents=1', flag]);
    assert.equal(code, 2, `${flag}: exited ${code}\n${stderr}`);
    assert.match(stderr, message);
  }
});

test('npm run bench refuses a --json or --markdown file it could not write, before running', async () => {
  for (const flag of ['--json=/nonexistent-dir/out.json', '--markdown=/nonexistent-dir/out.md']) {
    const { code, stderr } = await run(['--quick', '--only=agents', '--agents=1', flag]);
    assert.equal(code, 2, `${flag}: exited ${code}\n${stderr}`);
    assert.match(stderr, /cannot write there \(ENOENT\)/);
  }
});

const runAb = (args: string[]): ReturnType<typeof run> => run(args, 'scripts/bench/ab.ts');

test('scripts/bench/ab.ts serves every load from the bare server, this checkout and a commit, and prints numbers for each', { timeout: 180_000 }, async () => {
  for (const load of ['chat', 'chat-no-turn', 'state', 'sse-burst', 'sse-turn']) {
    const { code, stdout, stderr } = await runAb(['--base=HEAD', `--load=${load}`, '--rounds=3', '--batch=20', '--warmup=1', '--connections=4']);
    assert.equal(code, 0, `ab.ts --load=${load} exited ${code}\n${stderr}`);
    for (const side of ['bare node:http', 'router (this checkout)', 'router at HEAD']) {
      assert.match(stdout, new RegExp(`^\\| ${side.replace(/[()]/g, '\\$&')}[^|]* \\| \\d+\\.\\d\\d \\|`, 'm'), `${load}: no number for ${side}\n${stdout}`);
    }
    assert.match(stdout, /^\| router \(this checkout\) \/ router at HEAD [^|]*\| \d+\.\d{3} \|/m);
  }
});

test('scripts/bench/ab.ts --host=server and --host=fastify serve AgentServer and the router in Fastify beside their yardsticks', { timeout: 180_000 }, async () => {
  // One load each (the other loads go through the same sides): the whole bench file is on the suite's clock.
  const hosts = [
    ['server', 'chat', 'bare node:http', 'AgentServer'],
    ['fastify', 'state', 'Fastify 5 native routes', 'router in Fastify'],
  ] as const;
  for (const [host, load, reference, side] of hosts) {
    const { code, stdout, stderr } = await runAb([`--host=${host}`, '--base=HEAD', `--load=${load}`, '--rounds=3', '--batch=20', '--warmup=1', '--connections=4']);
    assert.equal(code, 0, `ab.ts --host=${host} --load=${load} exited ${code}\n${stderr}`);
    for (const name of [reference, `${side} (this checkout)`, `${side} at HEAD`]) {
      assert.match(stdout, new RegExp(`^\\| ${name.replace(/[()]/g, '\\$&')}[^|]* \\| \\d+\\.\\d\\d \\|`, 'm'), `${host} ${load}: no number for ${name}\n${stdout}`);
    }
  }
});

test('scripts/bench/ab.ts refuses unknown options and revisions with its usage', async () => {
  const unknown = await runAb(['--frobnicate']);
  assert.equal(unknown.code, 2);
  assert.match(unknown.stderr, /unknown option --frobnicate/);
  const badRev = await runAb(['--base=no-such-revision']);
  assert.equal(badRev.code, 2);
  assert.match(badRev.stderr, /--base=no-such-revision is not a commit/);
  assert.match(badRev.stderr, /Usage: node --import tsx scripts\/bench\/ab.ts/);
  const twice = await runAb(['--rounds=2', '--rounds=3']);
  assert.equal(twice.code, 2);
  assert.match(twice.stderr, /--rounds is given twice/);
  const empty = await runAb(['--base=']);
  assert.equal(empty.code, 2);
  assert.match(empty.stderr, /--base needs a revision/);
});

test('scripts/bench/profile.ts and heap-diff.ts answer --help and refuse unknown options, instead of starting a run', async () => {
  for (const script of ['scripts/bench/profile.ts', 'scripts/bench/heap-diff.ts']) {
    const help = await run(['--help'], script);
    assert.equal(help.code, 0, `${script} --help exited ${help.code}\n${help.stderr}`);
    assert.match(help.stdout, new RegExp(`^Usage: node --import tsx ${script.replace(/[./]/g, '\\$&')}`));
    const unknown = await run(['--frobnicate'], script);
    assert.equal(unknown.code, 2, `${script} --frobnicate exited ${unknown.code}\n${unknown.stderr}`);
    assert.match(unknown.stderr, /unknown option --frobnicate/);
  }
});

test('scripts/bench/heap-diff.ts and profile.ts check the contender\'s reply first: a native route that does not stream fails with why, instead of hanging or being profiled', { timeout: 60_000 }, async () => {
  for (const [script, args] of [['scripts/bench/heap-diff.ts', ['--contender=fastify', '--streams=10']], ['scripts/bench/profile.ts', ['--contender=fastify', '--load=sse-burst', '--seconds=1']]] as const) {
    const { code, stdout, stderr } = await run([...args], script);
    assert.equal(code, 1, `${script} exited ${code}\n${stderr}`);
    assert.match(stderr, /fastify: wrong stream reply/);
    assert.equal(stdout, '');
  }
});

test('npm run bench stopped with Ctrl-C removes its compiled copy of the contenders', { timeout: 60_000 }, async () => {
  // --force so a busy machine does not refuse before compiling; a small scenario, interrupted once compiled.
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/bench/index.ts', '--force', '--only=streams', '--streams=20', '--rounds=1', '--hold=10'], { cwd: process.cwd() });
  const outDir = path.join(process.cwd(), 'node_modules/.cache/agent-router-bench', String(child.pid));
  let stderr = '';
  child.stdout.resume();
  await new Promise<void>((resolve) => {
    child.stderr.setEncoding('utf8').on('data', (text: string) => {
      stderr += text;
      if (stderr.includes('streams: ')) resolve();
    });
  });
  assert.ok(existsSync(outDir), `no compiled copy at ${outDir}\n${stderr}`);
  const code = await new Promise<number | null>((resolve) => {
    child.on('close', (exitCode) => resolve(exitCode));
    child.kill('SIGINT');
  });
  assert.equal(code, 130);
  assert.ok(!existsSync(outDir), `${outDir} was left behind`);
});
