/**
 * What one open stream keeps on a contender's heap, by object kind: two
 * heap snapshots (before and after opening N slow streams, every id's agent
 * created before the first), diffed by constructor / closure name.
 *
 *   node --import tsx scripts/bench/heap-diff.ts --contender=router --streams=1000
 *
 * A diagnostic for scenario 5's "heap per stream" number, not part of the run.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { compile } from './lib/build.ts';
import { Contender } from './lib/contender.ts';
import { inspectMachine } from './lib/machine.ts';
import { SLOW_MESSAGE, SLOW_PREFIX } from './lib/protocol.ts';
import { RawConnection, requestBytes } from './lib/raw-http.ts';
import { holdStreams } from './lib/streams.ts';
import { sleep } from './lib/stats.ts';

const root = path.resolve(import.meta.dirname, '../..');

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
  nodes: number[];
  strings: string[];
}

/** Count and self size per `type:name` (strings and numbers lumped by type). */
function tally(file: string): Map<string, { count: number; size: number }> {
  const data = JSON.parse(readFileSync(file, 'utf8')) as Snapshot;
  const fields = data.snapshot.meta.node_fields;
  const types = data.snapshot.meta.node_types[0];
  const width = fields.length;
  const typeAt = fields.indexOf('type');
  const nameAt = fields.indexOf('name');
  const sizeAt = fields.indexOf('self_size');
  const result = new Map<string, { count: number; size: number }>();
  for (let i = 0; i < data.nodes.length; i += width) {
    const type = types[data.nodes[i + typeAt] as number] as string;
    const name = data.strings[data.nodes[i + nameAt] as number] as string;
    const key = ['object', 'closure', 'native', 'hidden', 'array', 'code'].includes(type) ? `${type}: ${name.slice(0, 80)}` : type;
    const entry = result.get(key) ?? { count: 0, size: 0 };
    entry.count++;
    entry.size += data.nodes[i + sizeAt] as number;
    result.set(key, entry);
  }
  return result;
}

function flag(name: string, fallback: string): string {
  const prefix = `--${name}=`;
  return process.argv.find((arg) => arg.startsWith(prefix))?.slice(prefix.length) ?? fallback;
}

const name = flag('contender', 'router');
const count = Number(flag('streams', '1000'));
const machine = inspectMachine();
const build = compile(root, machine.pinned);
const dir = mkdtempSync(path.join(os.tmpdir(), 'agent-router-heap-'));
try {
  const contender = await Contender.start(build.runtime, name);
  const target = (i: number): string => `${contender.prefix}/${SLOW_PREFIX}${i}/chat?stream=true`;
  const body = JSON.stringify({ message: SLOW_MESSAGE });
  const connection = await RawConnection.connect(contender.port);
  for (let i = 0; i < count; i++) await connection.request(requestBytes('GET', `${contender.prefix}/${SLOW_PREFIX}${i}/state`, contender.port));
  connection.close();
  const warm = await holdStreams(contender.port, 50, target, body);
  warm.close();
  await sleep(500);
  const before = tally(await contender.snapshot(path.join(dir, 'before.heapsnapshot')));
  const held = await holdStreams(contender.port, count, target, body);
  await sleep(1000);
  const after = tally(await contender.snapshot(path.join(dir, 'after.heapsnapshot')));
  held.close();
  await contender.stop();
  const rows = [...after].map(([key, value]) => {
    const old = before.get(key) ?? { count: 0, size: 0 };
    return { key, count: (value.count - old.count) / held.opened, size: (value.size - old.size) / held.opened };
  }).sort((a, b) => b.size - a.size);
  const total = rows.reduce((sum, row) => sum + row.size, 0);
  process.stdout.write(`### Heap per open stream, ${name}: ${held.opened} streams, ${total.toFixed(0)} B each (snapshot self sizes)\n\n| Kind | objects/stream | bytes/stream |\n|---|---:|---:|\n`);
  for (const row of rows.slice(0, Number(flag('top', '40')))) process.stdout.write(`| ${row.key.replace(/\|/g, '\\|')} | ${row.count.toFixed(2)} | ${row.size.toFixed(0)} |\n`);
} finally {
  build.cleanup();
  rmSync(dir, { recursive: true, force: true });
}
