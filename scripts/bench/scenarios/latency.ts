/**
 * Scenario 4: time to first byte and to the first SSE chunk of one stream,
 * one request at a time on one keep-alive connection per contender. The
 * contenders take turns request by request (bare, router, server, bare, ...),
 * so a noisy moment hits them all alike.
 */
import { Contender } from '../lib/contender.ts';
import { RawConnection, requestBytes, type Timing } from '../lib/raw-http.ts';
import { BURST_PREFIX, SSE_CHUNKS, SSE_MESSAGE } from '../lib/protocol.ts';
import { verdict, type Row, type ScenarioResult } from '../lib/report.ts';
import { median, percentile } from '../lib/stats.ts';
import { verifyStream } from '../lib/verify.ts';
import { fileOf, firstLine, label, rotate, type Context } from './common.ts';

const NAMES = ['bare', 'router', 'server'];

interface RoundStats {
  firstByte50: number;
  firstByte99: number;
  firstChunk50: number;
  firstChunk99: number;
}

function stats(timings: Timing[]): RoundStats {
  const firstByte = timings.map((timing) => timing.firstByte);
  const firstChunk = timings.map((timing) => timing.firstChunk);
  return {
    firstByte50: percentile(firstByte, 50),
    firstByte99: percentile(firstByte, 99),
    firstChunk50: percentile(firstChunk, 50),
    firstChunk99: percentile(firstChunk, 99),
  };
}

interface Entry {
  name: string;
  contender: Contender;
  connection: RawConnection;
  request: Buffer;
  timings: Timing[];
}

/** Starts a contender, checks its stream, opens the timing connection; stops it again on failure. */
async function openEntry(context: Context, name: string): Promise<Entry> {
  const contender = await Contender.start(context.runtime, fileOf(name));
  try {
    await verifyStream(contender, `${BURST_PREFIX}verify`, SSE_MESSAGE, SSE_CHUNKS);
    const connection = await RawConnection.connect(contender.port);
    return { name, contender, connection, request: streamRequest(contender, `${BURST_PREFIX}latency`), timings: [] };
  } catch (error) {
    await contender.stop();
    throw error;
  }
}

export function streamRequest(contender: Contender, id: string): Buffer {
  return requestBytes('POST', `${contender.prefix}/${id}/chat?stream=true`, contender.port, JSON.stringify({ message: SSE_MESSAGE }), 'text/event-stream');
}

export async function latencyScenario(context: Context): Promise<ScenarioResult> {
  const { rounds, samples } = context.settings;
  context.log(`latency: ${NAMES.length} contenders x ${rounds} rounds x ${samples} sequential streams`);
  const perRound = new Map<string, RoundStats[]>(NAMES.map((name) => [name, []]));
  const errors = new Map<string, string>();
  for (let round = 0; round < rounds; round++) {
    const live: Entry[] = [];
    try {
      for (const name of NAMES) {
        if (errors.has(name)) continue;
        try {
          live.push(await openEntry(context, name));
        } catch (error) {
          errors.set(name, `not available: ${firstLine(error)}`);
        }
      }
      // One contender's bad answer fails its row, not the scenario: the others' numbers stand, as in the other scenarios.
      const time = async (entry: Entry): Promise<Timing | undefined> => {
        if (errors.has(entry.name)) return undefined;
        try {
          const timing = await entry.connection.request(entry.request);
          if (timing.status === 200) return timing;
          errors.set(entry.name, `failed in round ${round + 1}: status ${timing.status}`);
        } catch (error) {
          errors.set(entry.name, `failed in round ${round + 1}: ${firstLine(error)}`);
        }
        return undefined;
      };
      // Warm-up: a fifth of the samples, unrecorded.
      for (let i = 0; i < Math.max(10, samples / 5); i++) for (const entry of live) await time(entry);
      for (let i = 0; i < samples; i++) {
        for (const entry of rotate(live, i)) {
          const timing = await time(entry);
          if (timing !== undefined) entry.timings.push(timing);
        }
      }
      for (const entry of live) if (!errors.has(entry.name)) perRound.get(entry.name)?.push(stats(entry.timings));
    } finally {
      for (const entry of live) {
        entry.connection.close();
        await entry.contender.stop();
      }
    }
  }
  const summary = (name: string): RoundStats => {
    const list = perRound.get(name) ?? [];
    return {
      firstByte50: median(list.map((item) => item.firstByte50)),
      firstByte99: median(list.map((item) => item.firstByte99)),
      firstChunk50: median(list.map((item) => item.firstChunk50)),
      firstChunk99: median(list.map((item) => item.firstChunk99)),
    };
  };
  const bare = summary('bare');
  const rows: Row[] = NAMES.map((name) => {
    const error = errors.get(name);
    if (error !== undefined) return { contender: label(name), cells: { firstByte50: error } };
    const own = summary(name);
    const slower = own.firstByte50 - bare.firstByte50;
    return {
      contender: name === 'bare' ? 'bare node:http SSE (ceiling)' : label(name),
      cells: {
        ...own,
        slower: name === 'bare' ? undefined : slower,
        goal: name === 'router' ? verdict(Number.isFinite(slower) ? slower <= 0.5 : undefined, '≤ +0.50 ms first byte p50') : '',
      },
    };
  });
  return {
    id: 'latency',
    title: '4. Time to first byte and first chunk, one stream at a time',
    columns: [
      { key: 'firstByte50', label: 'first byte p50', format: 'ms' },
      { key: 'firstByte99', label: 'first byte p99', format: 'ms' },
      { key: 'firstChunk50', label: 'first chunk p50', format: 'ms' },
      { key: 'firstChunk99', label: 'first chunk p99', format: 'ms' },
      { key: 'slower', label: 'first byte p50 vs bare', format: 'ms' },
      { key: 'goal', label: 'goal', format: 'text' },
    ],
    rows,
    notes: [
      `${samples} sequential \`POST /{id}/chat?stream=true\` (${SSE_CHUNKS}-chunk burst reply) per contender per round on one keep-alive connection, contenders taking turns request by request; median over ${rounds} rounds of each round's percentile. Measured from writing the request to the first response byte, and to the first \`data:\` line.`,
    ],
    required: ['firstByte50', 'firstChunk50'],
  };
}
