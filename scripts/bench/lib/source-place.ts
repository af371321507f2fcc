/**
 * Where a function of a contender lives, as a reader wants it: the .ts
 * source and line for the bench's compiled copy (through its source maps),
 * the repo path for other local files, the module name for Node's own.
 * Shared by the CPU profile (call frames) and the heap diff (closures).
 */
import { readFileSync } from 'node:fs';
import { SourceMap } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(import.meta.dirname, '../../..');
const maps = new Map<string, SourceMap | undefined>();

/** `src/router/router.ts:120` for a 0-based line and column of `url` (a file URL, a path or `node:` name). */
export function sourcePlace(url: string, line0: number, column0: number, outDir: string): string {
  let file = url.startsWith('file:') ? fileURLToPath(url) : url;
  let line = line0 + 1;
  if (file.startsWith(outDir)) {
    if (!maps.has(file)) {
      try {
        maps.set(file, new SourceMap(JSON.parse(readFileSync(`${file}.map`, 'utf8')) as ConstructorParameters<typeof SourceMap>[0]));
      } catch {
        maps.set(file, undefined);
      }
    }
    const entry = maps.get(file)?.findEntry(line0, column0) as { originalLine?: number } | undefined;
    if (entry?.originalLine !== undefined) line = entry.originalLine + 1;
    file = path.relative(outDir, file).replace(/\.js$/, '.ts');
  } else if (file.startsWith(root)) {
    file = path.relative(root, file);
  } else if (file.startsWith('node:')) {
    file = file.slice(5);
  }
  return `${file}:${line}`;
}
