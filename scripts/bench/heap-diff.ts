/**
 * What one open stream keeps on a contender's heap, by object kind: two
 * heap snapshots (before and after opening N slow streams, every id's agent
 * created before the first), diffed by constructor / closure name.
 *
 *   node --import tsx scripts/bench/heap-diff.ts --contender=router --streams=1000
 *
 * `--abortable` opens scenario 5's other streams: their model reads the
 * turn's signal. `--keep=DIR` keeps both snapshots.
 *
 * A diagnostic for scenario 5's "heap per stream" number, not part of the run.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { compile } from './lib/build.ts';
import { Contender } from './lib/contender.ts';
import { checkFlags, countFlag, flag } from './lib/flag.ts';
import { inspectMachine } from './lib/machine.ts';
import { sourcePlace } from './lib/source-place.ts';
import { ABORTABLE_PREFIX, BURST_PREFIX, SLOW_MESSAGE, SLOW_PREFIX, SSE_CHUNKS, SSE_MESSAGE } from './lib/protocol.ts';
import { RawConnection, requestBytes } from './lib/raw-http.ts';
import { holdStreams } from './lib/streams.ts';
import { sleep } from './lib/stats.ts';
import { verifyStream } from './lib/verify.ts';

const root = path.resolve(import.meta.dirname, '../..');

interface Snapshot {
  snapshot: {
    meta: {
      node_fields: string[];
      node_types: [string[], ...unknown[]];
      edge_fields: string[];
      edge_types: [string[], ...unknown[]];
      location_fields: string[];
    };
  };
  nodes: number[];
  edges: number[];
  locations: number[];
  strings: string[];
}

interface Tally {
  /** Count and self size per `type: name` (strings and numbers lumped by type). */
  kinds: Map<string, { count: number; size: number }>;
  /** Closures per `name (source:line)`: which functions a held stream keeps alive. */
  closures: Map<string, number>;
  /** Plain objects per property names (`{a, b}`): which literals a held stream keeps. */
  literals: Map<string, number>;
}

function tally(file: string, outDir: string): Tally {
  const data = JSON.parse(readFileSync(file, 'utf8')) as Snapshot;
  const meta = data.snapshot.meta;
  const fields = meta.node_fields;
  const types = meta.node_types[0];
  const width = fields.length;
  const typeAt = fields.indexOf('type');
  const nameAt = fields.indexOf('name');
  const sizeAt = fields.indexOf('self_size');
  const edgeCountAt = fields.indexOf('edge_count');
  const edgeWidth = meta.edge_fields.length;
  const edgeTypeAt = meta.edge_fields.indexOf('type');
  const edgeNameAt = meta.edge_fields.indexOf('name_or_index');
  const edgeToAt = meta.edge_fields.indexOf('to_node');
  const namedEdge = new Set(['context', 'property', 'internal', 'shortcut', 'weak']);
  // A node's edges follow one another in node order: the first edge of each node by prefix sum.
  const firstEdge = new Map<number, number>();
  for (let i = 0, edge = 0; i < data.nodes.length; i += width) {
    firstEdge.set(i, edge);
    edge += (data.nodes[i + edgeCountAt] as number) * edgeWidth;
  }
  const edgeTo = (node: number, name: (edgeName: string) => boolean): number | undefined => {
    const start = firstEdge.get(node) as number;
    for (let e = start, n = 0; n < (data.nodes[node + edgeCountAt] as number); n++, e += edgeWidth) {
      const type = meta.edge_types[0][data.edges[e + edgeTypeAt] as number] as string;
      if (namedEdge.has(type) && name(data.strings[data.edges[e + edgeNameAt] as number] as string)) return data.edges[e + edgeToAt] as number;
    }
    return undefined;
  };
  const positions = new Map<number, [number, number]>();
  const locationWidth = meta.location_fields.length;
  for (let l = 0; l < data.locations.length; l += locationWidth) {
    positions.set(data.locations[l] as number, [data.locations[l + 2] as number, data.locations[l + 3] as number]);
  }
  const kinds = new Map<string, { count: number; size: number }>();
  const closures = new Map<string, number>();
  const literals = new Map<string, number>();
  const propertyNames = (node: number): string => {
    const names: string[] = [];
    const start = firstEdge.get(node) as number;
    for (let e = start, n = 0; n < (data.nodes[node + edgeCountAt] as number); n++, e += edgeWidth) {
      if (meta.edge_types[0][data.edges[e + edgeTypeAt] as number] !== 'property') continue;
      names.push(String(data.strings[data.edges[e + edgeNameAt] as number]));
    }
    return `{${names.join(', ')}}`;
  };
  for (let i = 0; i < data.nodes.length; i += width) {
    const type = types[data.nodes[i + typeAt] as number] as string;
    const name = data.strings[data.nodes[i + nameAt] as number] as string;
    const key = ['object', 'closure', 'native', 'hidden', 'array', 'code'].includes(type) ? `${type}: ${name.slice(0, 80)}` : type;
    const entry = kinds.get(key) ?? { count: 0, size: 0 };
    entry.count++;
    entry.size += data.nodes[i + sizeAt] as number;
    kinds.set(key, entry);
    if (type === 'object' && name === 'Object') {
      const literal = propertyNames(i);
      literals.set(literal, (literals.get(literal) ?? 0) + 1);
    }
    if (type !== 'closure') continue;
    // closure -> shared function info -> script -> its name; a builtin (a promise's resolve functions) has none.
    const shared = edgeTo(i, (edge) => edge === 'shared');
    const script = shared === undefined ? undefined : edgeTo(shared, (edge) => edge.startsWith('script'));
    const url = script === undefined ? undefined : edgeTo(script, (edge) => edge === 'name');
    const position = positions.get(i);
    const where = url === undefined || position === undefined ? 'builtin' : sourcePlace(data.strings[data.nodes[url + nameAt] as number] as string, position[0], position[1], outDir);
    const closure = `${name || '(anonymous)'} (${where})`;
    closures.set(closure, (closures.get(closure) ?? 0) + 1);
  }
  return { kinds, closures, literals };
}

const USAGE = `Usage: node --import tsx scripts/bench/heap-diff.ts [--contender=router] [--streams=1000] [--abortable] [--keep=DIR] [--top=40]
  --contender  a streaming file of scripts/bench/contenders/ (bare, router, server, fastify-router, express-router, koa-router)
  --streams    slow streams held open between the two heap snapshots
  --abortable  streams whose model sleeps on the turn's signal (scenario 5's last row)
  --keep=DIR   keep both heap snapshots in DIR
  --top        rows of the table by kind`;
checkFlags(USAGE, ['contender', 'streams', 'keep', 'top'], ['abortable']);
const name = flag('contender', 'router');
const count = countFlag('streams', 1000, USAGE);
const top = countFlag('top', 40, USAGE);
const machine = inspectMachine();
const build = compile(root, machine.pinned);
// --keep=DIR keeps the two snapshots there (before.heapsnapshot, after.heapsnapshot) for a closer look.
const kept = flag('keep', '');
const dir = kept === '' ? mkdtempSync(path.join(os.tmpdir(), 'agent-router-heap-')) : path.resolve(kept);
if (kept !== '') mkdirSync(dir, { recursive: true });
try {
  const contender = await Contender.start(build.runtime, name);
  // A contender that does not stream (a native framework route answers JSON) would never send the first
  // chunk the held streams wait for: checked first, as the bench does, so it fails with why instead of hanging.
  try {
    await verifyStream(contender, `${BURST_PREFIX}verify`, SSE_MESSAGE, SSE_CHUNKS);
  } catch (error) {
    await contender.stop();
    throw error;
  }
  const prefix = process.argv.includes('--abortable') ? ABORTABLE_PREFIX : SLOW_PREFIX;
  const target = (i: number): string => `${contender.prefix}/${prefix}${i}/chat?stream=true`;
  const body = JSON.stringify({ message: SLOW_MESSAGE });
  const connection = await RawConnection.connect(contender.port);
  for (let i = 0; i < count; i++) await connection.request(requestBytes('GET', `${contender.prefix}/${prefix}${i}/state`, contender.port));
  connection.close();
  const warm = await holdStreams(contender.port, 50, target, body);
  warm.close();
  // Past one slow chunk's interval: a model that does not read its signal ends its closed turn only at its next chunk.
  await sleep(1500);
  const outDir = path.resolve(build.runtime.contendersDir, '../../..');
  const before = tally(await contender.snapshot(path.join(dir, 'before.heapsnapshot')), outDir);
  const held = await holdStreams(contender.port, count, target, body);
  await sleep(1000);
  const after = tally(await contender.snapshot(path.join(dir, 'after.heapsnapshot')), outDir);
  held.close();
  await contender.stop();
  const rows = [...after.kinds].map(([key, value]) => {
    const old = before.kinds.get(key) ?? { count: 0, size: 0 };
    return { key, count: (value.count - old.count) / held.opened, size: (value.size - old.size) / held.opened };
  }).sort((a, b) => b.size - a.size);
  const total = rows.reduce((sum, row) => sum + row.size, 0);
  const escape = (text: string): string => text.replace(/\|/g, '\\|');
  process.stdout.write(`### Heap per open stream, ${name}: ${held.opened} streams, ${total.toFixed(0)} B each (snapshot self sizes)\n\n| Kind | objects/stream | bytes/stream |\n|---|---:|---:|\n`);
  for (const row of rows.slice(0, top)) process.stdout.write(`| ${escape(row.key)} | ${row.count.toFixed(2)} | ${row.size.toFixed(0)} |\n`);
  const closures = [...after.closures]
    .map(([key, value]) => ({ key, count: (value - (before.closures.get(key) ?? 0)) / held.opened }))
    .filter((row) => row.count >= 0.5)
    .sort((a, b) => b.count - a.count);
  process.stdout.write('\n### Closures each open stream keeps, by where they were made\n\n| Closure | per stream |\n|---|---:|\n');
  for (const row of closures) process.stdout.write(`| ${escape(row.key)} | ${row.count.toFixed(2)} |\n`);
  const literals = [...after.literals]
    .map(([key, value]) => ({ key, count: (value - (before.literals.get(key) ?? 0)) / held.opened }))
    .filter((row) => row.count >= 0.5)
    .sort((a, b) => b.count - a.count);
  process.stdout.write('\n### Plain objects each open stream keeps, by their properties\n\n| Properties | per stream |\n|---|---:|\n');
  for (const row of literals) process.stdout.write(`| ${escape(row.key.slice(0, 120))} | ${row.count.toFixed(2)} |\n`);
} finally {
  build.cleanup();
  if (kept === '') rmSync(dir, { recursive: true, force: true });
}
