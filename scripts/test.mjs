#!/usr/bin/env node
// Runs every test/**/*.test.ts. Node 20's `--test` finds no .ts files through
// tsx and a quoted glob fails, so this script lists the files itself, and
// exits 1 when it finds none (a CI run that ran no test must not pass).
//
//   node scripts/test.mjs            type-check, compile with tsc into .build/, run
//                                    the compiled tests under c8 (coverage of src/
//                                    must reach 90% of lines); this is `npm test`
//   node scripts/test.mjs --tsx      run the .ts tests through tsx (fast, no coverage)
//   node scripts/test.mjs [--tsx] test/unit/sse.test.ts ...   only these files or folders
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import path from 'node:path';

const root = path.resolve(import.meta.dirname, '..');
const args = process.argv.slice(2);
const useTsx = args.includes('--tsx');
const targets = args.filter((arg) => !arg.startsWith('--'));

function listTests(target) {
  const full = path.resolve(root, target);
  if (statSync(full).isFile()) return [full];
  return readdirSync(full, { recursive: true })
    .filter((name) => name.endsWith('.test.ts'))
    .map((name) => path.join(full, name));
}

const files = (targets.length > 0 ? targets : ['test']).flatMap(listTests).sort();
if (files.length === 0) {
  console.error('scripts/test.mjs: no *.test.ts files found; refusing to report success');
  process.exit(1);
}

function run(command, commandArgs, { exitOnFailure = true } = {}) {
  const result = spawnSync(command, commandArgs, { cwd: root, stdio: 'inherit', env: process.env });
  if (exitOnFailure && result.status !== 0) process.exit(result.status ?? 1);
  return result.status ?? 1;
}

const bin = (name) => path.join(root, 'node_modules', '.bin', name);
// The failed tests are also written to a file, printed last: a long log's end then names them.
const failuresFile = path.join(root, '.build', 'failed-tests.txt');
// Node applies the timeout to each test file as a whole too: test/e2e/bench.test.ts (about 60 s on two quiet
// CPUs) passed 120 s on a machine loaded to 5, so a hung test fails after 300 s instead.
const nodeTestFlags = [
  '--test', '--test-concurrency=2', '--test-timeout=300000',
  `--test-reporter=${process.stdout.isTTY ? 'spec' : 'tap'}`, '--test-reporter-destination=stdout',
  `--test-reporter=${path.join(root, 'scripts', 'test-failures.mjs')}`, `--test-reporter-destination=${failuresFile}`,
];

function runTests(command, commandArgs) {
  const status = run(command, commandArgs, { exitOnFailure: false });
  const failed = existsSync(failuresFile) ? readFileSync(failuresFile, 'utf8') : '';
  if (failed !== '') console.error(`\nFailed tests:\n${failed}`);
  process.exit(status);
}

// dist/ is what gets published; the README test installs it into a scratch project. Emptied first, as
// `npm run build` does: a file left from a source since renamed or removed would ship, and be tested.
rmSync(path.join(root, 'dist'), { recursive: true, force: true });
run(bin('tsc'), ['-p', 'scripts/tsconfig.build.json']);

if (useTsx) {
  rmSync(failuresFile, { force: true });
  mkdirSync(path.dirname(failuresFile), { recursive: true });
  runTests(process.execPath, ['--import', 'tsx', ...nodeTestFlags, ...files]);
} else {
  // c8 over tsx reports false coverage (tsx minifies each file onto a few
  // lines), so coverage is measured on what tsc emits, with source maps.
  rmSync(path.join(root, '.build'), { recursive: true, force: true });
  run(bin('tsc'), ['-p', 'tsconfig.json']);
  // The adapters against the frameworks' own types, without a body parser's type additions; which state types an Agent takes.
  run(bin('tsc'), ['-p', 'test/types/tsconfig.json']);
  // The library without the DOM library's types, as a Node project without lib "DOM" reads them.
  run(bin('tsc'), ['-p', 'test/types/tsconfig.no-dom.json']);
  run(bin('tsc'), ['-p', 'scripts/tsconfig.coverage.json']);
  const compiled = files.map((file) => path.join(root, '.build', path.relative(root, file)).replace(/\.ts$/, '.js'));
  runTests(bin('c8'), [
    // The CLI counts too: its tests run it as a child process, which inherits c8's NODE_V8_COVERAGE.
    '--include', '.build/src/**',
    '--reporter', 'text-summary', '--reporter', 'text',
    ...(targets.length === 0 ? ['--check-coverage', '--lines', '90'] : []),
    process.execPath, ...nodeTestFlags, ...compiled,
  ]);
}
