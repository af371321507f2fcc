/**
 * Scenario 5: many open streams in one process. N slow streams (one chunk a
 * second) are held open from this process; the contender's heap growth per
 * stream (after full GCs) is compared with the bare SSE server's, and a
 * probe (a fresh 64-chunk stream, one at a time) measures how long a new
 * stream waits for its first chunk while the N are open.
 */
import { spawnSync } from 'node:child_process';
import { Contender } from '../lib/contender.ts';
import { RawConnection, requestBytes } from '../lib/raw-http.ts';
import { ABORTABLE_PREFIX, BURST_PREFIX, SLOW_INTERVAL_MS, SLOW_MESSAGE, SLOW_PREFIX, SSE_CHUNKS, SSE_MESSAGE } from '../lib/protocol.ts';
import { verdict, type Row, type ScenarioResult } from '../lib/report.ts';
import { holdStreams } from '../lib/streams.ts';
import { median, now, percentile, sleep } from '../lib/stats.ts';
import { verifyStream } from '../lib/verify.ts';
import { inRounds, label, partialNotes, type Context } from './common.ts';
import { streamRequest } from './latency.ts';

const NAMES = ['bare', 'router', 'server', 'router-abortable'];

/** The ids a contender's slow streams use: the abortable row's model reads its signal. */
function slowPrefix(name: string): string {
  return name === 'router-abortable' ? ABORTABLE_PREFIX : SLOW_PREFIX;
}
/** Descriptors kept free for everything else a process opens. */
const SPARE_FILES = 256;

interface Sample {
  opened: number;
  failed: number;
  firstFailure: string | undefined;
  openSeconds: number;
  heapPerStream: number;
  rssPerStream: number;
  probe50: number;
  probe99: number;
  /** Chunks received per second per open stream while held (1 when every stream keeps its pace). */
  pace: number;
  /** Heap growth per chunk delivered while the streams were held (0 when a chunk leaves nothing behind). */
  growthPerChunk: number;
}

function hardFileLimit(): number {
  const value = Number(spawnSync('/bin/sh', ['-c', 'ulimit -Hn'], { encoding: 'utf8' }).stdout.trim());
  return Number.isFinite(value) ? value : Infinity; // "unlimited"
}

/** Creates the per-id state (a live agent, or the bare server's record) for every stream's id, over a few connections. */
async function prepareIds(contender: Contender, count: number, prefix: string): Promise<void> {
  const connections = await Promise.all(Array.from({ length: 8 }, () => RawConnection.connect(contender.port)));
  let next = 0;
  await Promise.all(connections.map(async (connection) => {
    while (next < count) {
      const i = next++;
      const timing = await connection.request(requestBytes('GET', `${contender.prefix}/${prefix}${i}/state`, contender.port));
      if (timing.status !== 200) throw new Error(`GET state answered ${timing.status}`);
    }
    connection.close();
  }));
}

async function measure(context: Context, contender: Contender, count: number, prefix: string): Promise<Sample> {
  const { probes, hold } = context.settings;
  const body = JSON.stringify({ message: SLOW_MESSAGE });
  const target = (i: number): string => `${contender.prefix}/${prefix}${i}/chat?stream=true`;
  await prepareIds(contender, count, prefix);
  // JIT warm-up of the stream path: a few streams opened and dropped.
  const warm = await holdStreams(contender.port, Math.min(50, count), target, body);
  warm.close();
  let probe = await RawConnection.connect(contender.port);
  const probeRequest = streamRequest(contender, `${BURST_PREFIX}probe`);
  for (let i = 0; i < 10; i++) await probe.request(probeRequest);
  probe.close();
  // Past one slow chunk: a closed warm-up stream's model (on a plain timer) lets go at its next tick.
  await sleep(context.settings.quick ? 50 : SLOW_INTERVAL_MS + 200);
  const before = await contender.heap();
  const started = now();
  const held = await holdStreams(contender.port, count, target, body);
  const openSeconds = (now() - started) / 1000;
  try {
    // Not one stream open is no measurement (its heap per stream would be the growth over 1): the row says why instead.
    if (held.opened === 0) throw new Error(`no stream opened of ${count}: ${held.firstFailure ?? 'unknown'}`);
    // Lets the last streams' first turns settle (their agents' storage reads, timers armed).
    await sleep(context.settings.quick ? 200 : 1000);
    const after = await contender.heap();
    probe = await RawConnection.connect(contender.port);
    const firstChunks: number[] = [];
    for (let i = 0; i < probes; i++) firstChunks.push((await probe.request(probeRequest)).firstChunk);
    // The baseline of the growth per chunk is taken after the probes: their turns stay in the probe agent's
    // history (a library contender's, not bare's), which is not what the held streams' chunks leave behind.
    const beforeHold = await contender.heap();
    const frames = held.frames();
    const paceStart = now();
    await sleep(hold * 1000);
    const delivered = held.frames() - frames;
    const pace = delivered / ((now() - paceStart) / 1000) / Math.max(1, held.opened);
    const later = await contender.heap();
    const sample: Sample = {
      opened: held.opened,
      failed: held.failed,
      firstFailure: held.firstFailure,
      openSeconds,
      heapPerStream: (after.heapUsed - before.heapUsed) / Math.max(1, held.opened),
      rssPerStream: (after.rss - before.rss) / Math.max(1, held.opened),
      probe50: percentile(firstChunks, 50),
      probe99: percentile(firstChunks, 99),
      pace,
      growthPerChunk: (later.heapUsed - beforeHold.heapUsed) / Math.max(1, delivered),
    };
    context.log(`  ${contender.name} (${prefix}): ${held.opened} open in ${openSeconds.toFixed(1)} s (${held.failed} failed), ${Math.round(sample.heapPerStream)} B heap/stream, probe p99 ${sample.probe99.toFixed(2)} ms, pace ${pace.toFixed(2)}/s, ${Math.round(sample.growthPerChunk)} B heap growth per chunk`);
    return sample;
  } finally {
    held.close();
    probe.close();
  }
}

export async function streamsScenario(context: Context): Promise<ScenarioResult> {
  const limit = Math.min(context.machine.fileLimit, hardFileLimit()) - SPARE_FILES;
  const count = Math.max(1, Math.min(context.settings.streams, limit));
  const notes: string[] = [];
  if (count < context.settings.streams) {
    notes.push(`**Reduced to ${count} streams**: the open-file limit (\`ulimit -n\` ${context.machine.fileLimit}) is below ${context.settings.streams} + ${SPARE_FILES}; raise it (\`ulimit -n 65536\`) before \`npm run bench\` for the full count.`);
  }
  const rounds = Math.min(context.settings.rounds, 3);
  context.log(`streams: ${NAMES.length} contenders x ${rounds} rounds x ${count} open streams`);
  const outcomes = await inRounds(
    context,
    NAMES,
    rounds,
    (contender) => verifyStream(contender, `${BURST_PREFIX}verify`, SSE_MESSAGE, SSE_CHUNKS),
    (contender, _round, name) => measure(context, contender, count, slowPrefix(name)),
  );
  const pick = (name: string, key: keyof Sample): number => median((outcomes.get(name)?.samples ?? []).map((sample) => sample[key] as number));
  const bareHeap = pick('bare', 'heapPerStream');
  const rows: Row[] = NAMES.map((name) => {
    const outcome = outcomes.get(name);
    if (outcome?.error !== undefined && outcome.samples.length === 0) return { contender: label(name), cells: { opened: outcome.error } };
    const failures = (outcome?.samples ?? []).filter((sample) => sample.failed > 0);
    if (failures[0] !== undefined) notes.push(`${label(name)}: ${failures[0].failed} streams failed to open; first reason: ${failures[0].firstFailure ?? 'unknown'}`);
    const heap = pick(name, 'heapPerStream');
    const above = name === 'bare' ? undefined : heap - bareHeap;
    const opened = pick(name, 'opened');
    return {
      contender: name === 'bare' ? 'bare node:http SSE (ceiling)' : label(name),
      cells: {
        opened,
        openSeconds: pick(name, 'openSeconds'),
        heap,
        above,
        rss: pick(name, 'rssPerStream'),
        probe50: pick(name, 'probe50'),
        probe99: pick(name, 'probe99'),
        pace: pick(name, 'pace'),
        growth: pick(name, 'growthPerChunk'),
        goal: name === 'router'
          ? verdict(above === undefined || !Number.isFinite(above) ? undefined : above <= 2048 && opened >= count, `${count.toLocaleString('en-US')} open, ≤ 2 KB heap/stream above bare`)
          : '',
      },
    };
  });
  notes.unshift(
    ...partialNotes(outcomes),
    `${count.toLocaleString('en-US')} streams (\`POST /sse-slow-{i}/chat?stream=true\`, one chunk a second) held from one client process over raw sockets. Heap per stream = growth of \`heapUsed\` after two full GCs, from before opening to a moment (${context.settings.quick ? '0.2 s' : '1 s'}) after all are open, divided by the streams open; every id's agent (or the bare server's per-id record) is created before the first heap reading, so this is the stream alone (scenario 6 has the agent's own cost). Probe: ${context.settings.probes} sequential 64-chunk streams while the others are open; chunks/stream/s: chunks received per open stream per second over ${context.settings.hold} s (1.00 = every stream on time); heap growth per chunk: heap after those ${context.settings.hold} s minus heap before them, over the chunks delivered meanwhile (about 0 when a delivered chunk leaves nothing behind). Median of ${rounds} rounds.`,
    `The slow streams' model sleeps on a plain timer, as the bare server does. The last row (\`POST /sse-abortable-{i}/chat?stream=true\`) is the same router with a model that sleeps on the turn's \`request.signal\`, as a model passing it to \`fetch\` would: reading the signal makes the turn's AbortController (Node's object, with the abortable timer's listener on it), which that model costs under any server. The goal is read on the row whose model does what bare does.`,
  );
  return {
    id: 'streams',
    title: `5. ${count.toLocaleString('en-US')} open streams in one process`,
    columns: [
      { key: 'opened', label: 'streams open', format: 'int' },
      { key: 'openSeconds', label: 'time to open all', format: 'seconds' },
      { key: 'heap', label: 'heap/stream', format: 'bytes' },
      { key: 'above', label: 'above bare', format: 'bytes' },
      { key: 'rss', label: 'RSS/stream', format: 'bytes' },
      { key: 'probe50', label: 'probe first chunk p50', format: 'ms' },
      { key: 'probe99', label: 'probe first chunk p99', format: 'ms' },
      { key: 'pace', label: 'chunks/stream/s', format: 'decimal' },
      { key: 'growth', label: 'heap growth per chunk', format: 'bytes' },
      { key: 'goal', label: 'goal', format: 'text' },
    ],
    rows,
    notes,
    required: ['opened', 'heap', 'probe99'],
  };
}
