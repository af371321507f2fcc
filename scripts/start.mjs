#!/usr/bin/env node
// `npm start [-- flags]`: the demo server (or `npm start -- ./agents.js`), on a
// fresh clone after `npm ci`. Builds dist/ with tsc first when it is missing
// or older than src/, then runs the CLI's `serve` in this process (not a child:
// Ctrl-C then reaches the server once, not twice, and its graceful shutdown runs).
//
//   npm start                         demo registry on http://127.0.0.1:8080
//   npm start -- --port 0             any free port; the URL is printed
//   npm start -- ./agents.js --config agent-router.json
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

// npm's shell does not pass npm's SIGTERM on (see src/cli/parent-watch.ts): npm killed during the
// build below must not leave a server starting up with no one to stop it.
const parent = process.ppid;

const root = path.resolve(import.meta.dirname, '..');
const entry = path.join(root, 'dist/cli/run.js');

function newestSource(dir) {
  let newest = 0;
  for (const name of readdirSync(dir, { recursive: true })) {
    if (String(name).endsWith('.ts')) newest = Math.max(newest, statSync(path.join(dir, String(name))).mtimeMs);
  }
  return newest;
}

if (!existsSync(entry) || statSync(entry).mtimeMs < newestSource(path.join(root, 'src'))) {
  const tsc = path.join(root, 'node_modules/typescript/bin/tsc');
  if (!existsSync(tsc)) {
    console.error('npm start: dist/ is missing and TypeScript is not installed; run `npm ci` first');
    process.exit(1);
  }
  console.error('npm start: building dist/ with tsc ...');
  const build = spawnSync(process.execPath, [tsc, '-p', path.join(root, 'scripts/tsconfig.build.json')], { cwd: root, stdio: 'inherit' });
  if (build.status !== 0 || !existsSync(entry)) {
    console.error(`npm start: the build failed (tsc exit code ${build.status}); see the errors above`);
    process.exit(1);
  }
}

if (process.env.npm_command !== undefined && process.platform !== 'win32' && process.ppid !== parent) {
  console.error('npm start: npm went away while dist/ was being built; not starting the server');
  process.exit(1);
}

const { main } = await import(pathToFileURL(entry).href);
// As given: serve is the CLI's default command, and `npm start -- serve ./agents.js` (the README's
// `npm start` = `agent-router serve`) must not take "serve" for the module's name.
const code = await main(process.argv.slice(2));
// A failure exits now, as the bin does: a module that opened a connection or a timer would keep the process alive.
if (code !== undefined && code !== 0) process.exit(code);
if (code !== undefined) process.exitCode = code;
