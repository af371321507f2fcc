#!/usr/bin/env node
/**
 * Copies examples/ files into the docs blocks that show them: a fenced block
 * right after `<!-- example: examples/NAME -->`. With --check it changes
 * nothing and exits 1 when a block differs from its file (test/unit/docs.test.ts
 * runs the same check).
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

const MARKED = /<!-- example: (\S+) -->\n```(\w*)\n([\s\S]*?)```\n/g;

/** The blocks of `pages` (paths relative to `root`) that differ from their example file, as `page: file`. */
export function checkExampleBlocks(root, pages) {
  const drift = [];
  for (const page of pages) {
    for (const [, file, , code] of readFileSync(path.join(root, page), 'utf8').matchAll(MARKED)) {
      if (readFileSync(path.join(root, file), 'utf8') !== code) drift.push(`${page}: ${file}`);
    }
  }
  return drift;
}

function sync(root, page) {
  const text = readFileSync(path.join(root, page), 'utf8');
  const next = text.replace(MARKED, (_all, file, lang) => `<!-- example: ${file} -->\n\`\`\`${lang}\n${readFileSync(path.join(root, file), 'utf8')}\`\`\`\n`);
  if (next !== text) writeFileSync(path.join(root, page), next);
  return next !== text;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const root = process.cwd();
  const walk = (dir) => readdirSync(path.join(root, dir), { withFileTypes: true })
    .flatMap((e) => (e.isDirectory() ? walk(path.join(dir, e.name)) : e.name.endsWith('.md') ? [path.join(dir, e.name)] : []));
  const pages = ['README.md', ...walk('docs')];
  if (process.argv.includes('--check')) {
    const drift = checkExampleBlocks(root, pages);
    for (const line of drift) console.error(`differs from its file: ${line}`);
    process.exit(drift.length === 0 ? 0 : 1);
  }
  for (const page of pages) if (sync(root, page)) console.log(`updated ${page}`);
}
