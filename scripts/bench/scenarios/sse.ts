/**
 * Scenario 3: SSE throughput. Each request streams a 64-chunk reply; the
 * number is chunks per second (completed streams x 64), against a bare SSE
 * server writing the same frames. Burst: the model hands over all chunks
 * back to back; per turn: one chunk per event-loop turn (setImmediate).
 */
import type { LoadResult, LoadShape } from '../lib/load.ts';
import { BURST_PREFIX, SSE_CHUNKS, SSE_MESSAGE, TURN_PREFIX } from '../lib/protocol.ts';
import { verdict, type Row, type ScenarioResult } from '../lib/report.ts';
import { ratio } from '../lib/stats.ts';
import { verifyStream } from '../lib/verify.ts';
import { inRounds, label, partialNotes, type Context } from './common.ts';
import { busyText, measureLoad, summarize } from './throughput.ts';

const NAMES = ['bare', 'router', 'server'];

function shape(prefix: string): LoadShape {
  return {
    method: 'POST',
    path: (id) => `/${id}/chat?stream=true`,
    id: (connection, k) => `${prefix}${connection}-${k}`,
    body: JSON.stringify({ message: SSE_MESSAGE }),
    accept: 'text/event-stream',
  };
}

export async function sseScenario(context: Context): Promise<ScenarioResult> {
  context.log(`sse: ${NAMES.length} contenders x ${context.settings.rounds} rounds, burst and per turn`);
  const outcomes = await inRounds(
    context,
    NAMES,
    context.settings.rounds,
    async (contender) => {
      await verifyStream(contender, `${BURST_PREFIX}verify`, SSE_MESSAGE, SSE_CHUNKS);
      await verifyStream(contender, `${TURN_PREFIX}verify`, SSE_MESSAGE, SSE_CHUNKS);
    },
    async (contender): Promise<{ burst: LoadResult; turn: LoadResult }> => ({
      burst: await measureLoad(context, contender, shape(BURST_PREFIX), 'burst'),
      turn: await measureLoad(context, contender, shape(TURN_PREFIX), 'per turn'),
    }),
  );
  const pick = (name: string, variant: 'burst' | 'turn') => {
    const outcome = outcomes.get(name);
    return summarize(outcome === undefined ? undefined : { samples: outcome.samples.map((sample) => sample[variant]) });
  };
  const bareBurst = pick('bare', 'burst').rate * SSE_CHUNKS;
  const bareTurn = pick('bare', 'turn').rate * SSE_CHUNKS;
  const rows: Row[] = NAMES.map((name) => {
    const outcome = outcomes.get(name);
    if (outcome?.error !== undefined && outcome.samples.length === 0) return { contender: label(name), cells: { burst: outcome.error } };
    const burst = pick(name, 'burst');
    const turn = pick(name, 'turn');
    const burstRatio = ratio(burst.rate * SSE_CHUNKS, bareBurst);
    const turnRatio = ratio(turn.rate * SSE_CHUNKS, bareTurn);
    const met = Number.isFinite(burstRatio) && Number.isFinite(turnRatio) ? burstRatio >= 0.9 && turnRatio >= 0.9 : undefined;
    return {
      contender: name === 'bare' ? 'bare node:http SSE (ceiling)' : label(name),
      cells: {
        burst: burst.rate * SSE_CHUNKS,
        burstRatio,
        turn: turn.rate * SSE_CHUNKS,
        turnRatio,
        cpuBurst: burst.cpuPerRequest / SSE_CHUNKS,
        cpuTurn: turn.cpuPerRequest / SSE_CHUNKS,
        busy: busyText(burst),
        failures: burst.failures + turn.failures,
        goal: name === 'router' ? verdict(met, '≥ 0.90× bare, both') : '',
      },
    };
  });
  return {
    id: 'sse',
    title: `3. SSE, ${SSE_CHUNKS}-chunk replies (chunks/s)`,
    columns: [
      { key: 'burst', label: 'burst chunks/s', format: 'int' },
      { key: 'burstRatio', label: 'vs bare', format: 'ratio' },
      { key: 'turn', label: 'one per turn chunks/s', format: 'int' },
      { key: 'turnRatio', label: 'vs bare', format: 'ratio' },
      { key: 'cpuBurst', label: 'CPU µs/chunk, burst', format: 'decimal' },
      { key: 'cpuTurn', label: 'CPU µs/chunk, per turn', format: 'decimal' },
      { key: 'busy', label: 'CPU 0 / CPU 1 busy (burst)', format: 'text' },
      { key: 'failures', label: 'non-2xx / errors', format: 'int' },
      { key: 'goal', label: 'goal', format: 'text' },
    ],
    rows,
    notes: [
      ...partialNotes(outcomes),
      `chunks/s = completed streams/s x ${SSE_CHUNKS}; ${context.settings.connections} connections; each stream ends with \`event: done\`. The bare server writes the same frames and headers, without a model, agent or storage, one \`res.write\` per frame; the library writes the frames sent in one tick with one \`res.write\`, so in the burst it makes one write where bare makes 64 (the bytes of the events are the same). One per turn compares one write against one write. CPU µs/chunk: the contender's CPU time per chunk delivered (the stream's own request and reply included).`,
    ],
    required: ['burst', 'turn'],
  };
}
