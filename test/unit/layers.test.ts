// The layers of src/ (docs/design.md, "Layers"): a file may import files of its own layer and of the
// layers before it in this table, never of one after it; and no chain of imports leads back to its start.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

// From the repository root: `npm test` runs this file compiled, from .build/.
const src = path.resolve(process.cwd(), 'src');

/** Lowest first. A folder is written `name/`; a file at the root of src/ by its name. */
const LAYERS: ReadonlyArray<readonly [layer: string, holds: readonly string[]]> = [
  ['base', ['errors.ts', 'types.ts', 'options.ts']], // the public vocabulary: errors, JSON types, option checks
  ['lib', ['lib/']], // primitives shared by several folders: lock, cancel, list, JSON checks, fetch failures
  ['sse', ['sse/']], // the SSE codec, on strings and bytes only
  ['storage', ['storage/']],
  ['models', ['models/']],
  ['agent', ['agent/']],
  ['transports', ['transports/']],
  ['registry', ['registry/']], // the registry and the agent pool
  ['http', ['http/']], // the node:http pieces: body, path, CORS, responses
  ['router', ['router/']],
  ['server', ['server/']],
  ['adapters', ['adapters/']],
  ['cli', ['cli/']],
  ['index', ['index.ts']], // the package's face
];

/** The index in LAYERS of the layer that holds `file` (a path from src/), or -1. */
function layerOf(file: string): number {
  return LAYERS.findIndex(([, holds]) => holds.some((place) => (place.endsWith('/') ? file.startsWith(place) : file === place)));
}

// Top-level `import`/`export ... from` start a line in this code base; `import('...')` may stand anywhere.
const STATIC = /^(?:import|export)(?:\s+type)?\s*(?:[\w$]+\s*,\s*)?(?:\{[^}]*\}|\*(?:\s+as\s+[\w$]+)?|[\w$]+)?\s*(?:from\s*)?(['"])([^'"]+)\1/gm;
const DYNAMIC = /\bimport\s*\(\s*(['"])([^'"]+)\1\s*\)/g;

/** Every `.ts` file of src/, as a path from src/ with `/`, and the src/ files it imports. */
function readImports(): Map<string, string[]> {
  const files = readdirSync(src, { recursive: true, encoding: 'utf8' })
    .filter((name) => name.endsWith('.ts'))
    .map((name) => name.split(path.sep).join('/'))
    .sort();
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const text = readFileSync(path.join(src, file), 'utf8');
    const specifiers = [...text.matchAll(STATIC), ...text.matchAll(DYNAMIC)].map((match) => match[2]!);
    const imports = specifiers
      .filter((specifier) => specifier.startsWith('.'))
      .map((specifier) => path.posix.normalize(path.posix.join(path.posix.dirname(file), specifier)));
    for (const imported of imports) {
      assert.ok(files.includes(imported), `${file} imports "${imported}", which is no .ts file of src/`);
    }
    graph.set(file, [...new Set(imports)]);
  }
  return graph;
}

const graph = readImports();

test('layers: every file of src/ is in a layer of the table', () => {
  const placed = [...graph.keys()].filter((file) => layerOf(file) === -1).map((file) => `src/${file} is in no layer: add it to LAYERS`);
  assert.deepEqual(placed, []);
});

test('layers: no file imports a file of a later layer', () => {
  const wrong: string[] = [];
  for (const [file, imports] of graph) {
    for (const imported of imports) {
      const [from, to] = [layerOf(file), layerOf(imported)];
      if (from !== -1 && to > from) {
        wrong.push(`src/${file} imports src/${imported}: ${LAYERS[from]![0]} may not import ${LAYERS[to]![0]}, which comes after it`);
      }
    }
  }
  assert.deepEqual(wrong, []);
});

test('layers: no import cycle between files', () => {
  const cycles: string[] = [];
  const state = new Map<string, 'open' | 'done'>();
  const trail: string[] = [];
  const visit = (file: string): void => {
    state.set(file, 'open');
    trail.push(file);
    for (const imported of graph.get(file)!) {
      if (state.get(imported) === 'open') {
        cycles.push(`import cycle: ${[...trail.slice(trail.indexOf(imported)), imported].map((f) => `src/${f}`).join(' -> ')}`);
      } else if (!state.has(imported)) {
        visit(imported);
      }
    }
    trail.pop();
    state.set(file, 'done');
  };
  for (const file of graph.keys()) if (!state.has(file)) visit(file);
  assert.deepEqual(cycles, []);
});

test('layers: the reader finds the imports it must (a check on this test itself)', () => {
  assert.ok(graph.get('index.ts')!.includes('errors.ts'));
  assert.ok(graph.size > 50);
});
