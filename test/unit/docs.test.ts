/**
 * The documentation as a reader meets it: every relative link and anchor in
 * README, CONTRIBUTING, SECURITY, BENCHMARKS and docs/ leads somewhere, every
 * docs page is linked from another, and every code block marked as coming
 * from an examples/ file is that file.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';

const root = process.cwd();
// From the repository root: `npm test` runs this file compiled, from .build/, where scripts/ has no .mjs.
const { checkExampleBlocks } = (await import(pathToFileURL(path.join(root, 'scripts/docs-examples.mjs')).href)) as typeof import('../../scripts/docs-examples.mjs');
const docs = (dir: string): string[] =>
  readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? docs(path.join(dir, e.name)) : e.name.endsWith('.md') ? [path.join(dir, e.name)] : []));
const pages = ['README.md', 'CONTRIBUTING.md', 'SECURITY.md', 'BENCHMARKS.md', ...docs('docs')];

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes, repeats numbered. */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const [, heading] of withoutCode(markdown).matchAll(/^#{1,6} +(.+?) *#*$/gm)) {
    const slug = (heading ?? '').toLowerCase().replace(/`/g, '').replace(/[^\p{L}\p{N}\- _]/gu, '').replace(/ /g, '-');
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    out.add(n === 0 ? slug : `${slug}-${n}`);
  }
  return out;
}

function withoutCode(markdown: string): string {
  return markdown.replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '``');
}

/** `[text](target)` links outside code, without a scheme. */
function relativeLinks(markdown: string): string[] {
  return [...withoutCode(markdown).matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1] ?? '').filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target));
}

test('every relative link and anchor in the docs leads to a file and a heading that exist', () => {
  const broken: string[] = [];
  for (const page of pages) {
    const text = readFileSync(path.join(root, page), 'utf8');
    for (const link of relativeLinks(text)) {
      const [file = '', anchor] = link.split('#');
      const target = file === '' ? page : path.normalize(path.join(path.dirname(page), file));
      if (!existsSync(path.join(root, target))) {
        broken.push(`${page}: ${link} (no ${target})`);
        continue;
      }
      if (anchor !== undefined && anchor !== '') {
        if (statSync(path.join(root, target)).isDirectory() || !target.endsWith('.md')) broken.push(`${page}: ${link} (an anchor into a file that is not markdown)`);
        else if (!anchors(readFileSync(path.join(root, target), 'utf8')).has(anchor)) broken.push(`${page}: ${link} (no heading #${anchor} in ${target})`);
      }
    }
  }
  assert.deepEqual(broken, []);
});

test('every docs page is linked from the README or another page', () => {
  const linked = new Set<string>();
  for (const page of pages) {
    for (const link of relativeLinks(readFileSync(path.join(root, page), 'utf8'))) {
      const file = link.split('#')[0] ?? '';
      if (file !== '') linked.add(path.normalize(path.join(path.dirname(page), file)));
    }
  }
  assert.deepEqual(pages.filter((page) => page !== 'README.md' && !linked.has(page)), []);
});

test('every code block marked as coming from examples/ equals that file', () => {
  const drift = checkExampleBlocks(root, pages);
  assert.deepEqual(drift, [], 'run `node scripts/docs-examples.mjs` to copy the examples into the docs');
});

test('the README stays short: at most 12 KB', () => {
  assert.ok(statSync(path.join(root, 'README.md')).size <= 12 * 1024);
  assert.ok(statSync(path.join(root, 'BENCHMARKS.md')).size <= 15 * 1024);
});

test('no user-facing text speaks of "the spec" or "the seed"', () => {
  const files = [...pages, 'src/cli/help.ts'];
  const offenders = files.filter((page) => /\bthe spec\b|spec's|--storage spec|\bthe seed\b|seed's/i.test(readFileSync(path.join(root, page), 'utf8')));
  assert.deepEqual(offenders, []);
});
