/**
 * Compiles the contenders (and the src/ they import) with tsc into a
 * private folder under node_modules/.cache, so contenders run as plain
 * JavaScript: tsx costs nothing per request, but it adds start-up time and
 * its own modules to the heap that scenarios 5 and 6 measure. Each run gets
 * its own folder (runs may overlap: the test suite runs `--quick`).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Runtime } from './contender.ts';

export interface Build {
  runtime: Runtime;
  /** What happened, for the report header. */
  note: string;
  cleanup: () => void;
}

export function tsxRuntime(root: string, pin: boolean, note: string): Build {
  return {
    runtime: { contendersDir: path.join(root, 'scripts/bench/contenders'), extension: '.ts', nodeFlags: ['--import', 'tsx'], pin, cwd: root },
    note,
    cleanup: () => {},
  };
}

/**
 * Compiles into a fresh folder; falls back to tsx (and says so) when the
 * compiled contenders are missing. `label` tells apart two builds of one
 * process (ab.ts compiles this checkout and another commit's copy).
 */
export function compile(root: string, pin: boolean, label = ''): Build {
  const cache = path.join(root, 'node_modules/.cache/agent-router-bench');
  const outDir = path.join(cache, `${process.pid}${label === '' ? '' : `-${label}`}`);
  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(outDir, { recursive: true });
  // Under node_modules, Node looks for no package.json above: without this one the output would load as CommonJS.
  writeFileSync(path.join(outDir, 'package.json'), '{ "type": "module" }\n');
  const tsc = path.join(root, 'node_modules/.bin/tsc');
  const started = Date.now();
  const result = spawnSync(tsc, ['-p', 'scripts/bench/tsconfig.json', '--outDir', outDir], { cwd: root, encoding: 'utf8' });
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  const contendersDir = path.join(outDir, 'scripts/bench/contenders');
  const cleanup = (): void => rmSync(outDir, { recursive: true, force: true });
  const wanted = readdirSync(path.join(root, 'scripts/bench/contenders')).filter((file) => file.endsWith('.ts'));
  const missing = wanted.filter((file) => !existsSync(path.join(contendersDir, file.replace(/\.ts$/, '.js'))));
  if (result.error !== undefined || missing.length > 0) {
    cleanup();
    const why = result.error?.message ?? `tsc emitted no ${missing.join(', ')}`;
    return tsxRuntime(root, pin, `contenders run through tsx (compiling failed: ${why})`);
  }
  // Type errors elsewhere in the tree (work in progress) do not stop tsc from emitting.
  const errors = (result.stdout.match(/error TS\d+/g) ?? []).length;
  return {
    runtime: { contendersDir, extension: '.js', nodeFlags: [], pin, cwd: root },
    note: `contenders run as tsc output (compiled in ${seconds} s${errors > 0 ? `; tsc reported ${errors} type errors in the tree, emitted anyway` : ''})`,
    cleanup,
  };
}
