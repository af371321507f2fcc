/**
 * npm's `prepare`: builds dist/ when the package is installed from a git URL
 * or a folder, and on `npm ci` in a clone. npm installs the dev dependencies
 * (TypeScript) before it runs this for a git URL; a folder install links the
 * clone as it is, so there they come from `npm ci` in the clone.
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

let tsc;
try {
  // typescript's exports map hides bin/, so go through its package.json.
  const manifest = createRequire(import.meta.url).resolve('typescript/package.json');
  tsc = path.join(path.dirname(manifest), 'bin', 'tsc');
} catch {
  if (existsSync('dist/index.js')) process.exit(0);
  console.error('agent-router: dist/ is not built and TypeScript is not installed here; run `npm ci` in the agent-router folder, then install it again');
  process.exit(1);
}
execFileSync(process.execPath, ['-e', "require('node:fs').rmSync('dist', {recursive: true, force: true})"], { stdio: 'inherit' });
execFileSync(process.execPath, [tsc, '-p', 'scripts/tsconfig.build.json'], { stdio: 'inherit' });
