/**
 * Scenarios 1 and 2: requests per second of `POST /{id}/chat` (JSON in,
 * JSON out) and `GET /{id}/state`, every contender, as ratios to the bare
 * ceiling, and for our router inside a framework, to that framework's own
 * native route.
 */
import type { Contender } from '../lib/contender.ts';
import { runLoad, type LoadResult, type LoadShape } from '../lib/load.ts';
import { CHAT_MESSAGE, NO_TURN_PREFIX } from '../lib/protocol.ts';
import type { Row, ScenarioResult } from '../lib/report.ts';
import { verdict } from '../lib/report.ts';
import { median, ratio } from '../lib/stats.ts';
import { verifyChat, verifyState } from '../lib/verify.ts';
import { CONTENDERS, inRounds, label, partialNotes, type Context, type Outcome } from './common.ts';

const ALL = Object.keys(CONTENDERS);
/** Chat only: the router serving an agent whose chat() is its own, the serving work without the agent's turn. */
const NO_TURN = 'router-no-turn';
const GOAL = 0.9;
/** A window that saw no answer is tried again this long, when it was shorter. */
const RETRY_SECONDS = 2;

const chatShape: LoadShape = {
  method: 'POST',
  path: (id) => `/${id}/chat`,
  id: (connection, k) => `chat-${connection}-${k}`,
  body: JSON.stringify({ message: CHAT_MESSAGE }),
};

const noTurnShape: LoadShape = { ...chatShape, id: (connection, k) => `${NO_TURN_PREFIX}${connection}-${k}` };

const stateShape: LoadShape = {
  method: 'GET',
  path: (id) => `/${id}/state`,
  id: (connection, k) => `state-${connection}-${k}`,
};

/** `97% / 64%`: CPU 0 and CPU 1 busy. */
export function busyText(summary: Summary): string {
  const pct = (value: number): string => (Number.isFinite(value) ? `${Math.round(value * 100)}%` : '?');
  return `${pct(summary.cpu0Busy)} / ${pct(summary.cpu1Busy)}`;
}

/** Warm-up, then the measured run. */
export async function measureLoad(context: Context, contender: Contender, shape: LoadShape, what: string): Promise<LoadResult> {
  const { seconds, warmup, connections } = context.settings;
  await runLoad(contender, shape, warmup, connections);
  let measured = seconds;
  let result = await runLoad(contender, shape, measured, connections);
  // A loaded machine can let a --quick window pass before the first answer: one longer try before calling it none.
  if (result.requests === 0 && measured < RETRY_SECONDS) {
    context.log(`  ${contender.name} ${what}: no answer in ${measured} s; measured again for ${RETRY_SECONDS} s`);
    measured = RETRY_SECONDS;
    result = await runLoad(contender, shape, measured, connections);
  }
  // No successful response is no measurement: as a number (0 req/s) it would count as measured and the run exit 0.
  if (result.requests === 0) throw new Error(`${what}: no 2xx response in ${measured} s (${result.failures} non-2xx / errors)`);
  context.log(`  ${contender.name} ${what}: ${Math.round(result.rate)}/s, ${result.cpuPerRequest.toFixed(1)} µs CPU/req (process CPU ${Math.round(result.serverCpu * 100)}%, CPU 0/1 busy ${Math.round(result.cpu0Busy * 100)}%/${Math.round(result.cpu1Busy * 100)}%)`);
  return result;
}

export interface Summary {
  rate: number;
  cpuPerRequest: number;
  p99: number;
  serverCpu: number;
  clientCpu: number;
  cpu0Busy: number;
  cpu1Busy: number;
  failures: number;
}

export function summarize(outcome: Outcome<LoadResult> | undefined): Summary {
  const samples = outcome?.samples ?? [];
  return {
    rate: median(samples.map((sample) => sample.rate)),
    cpuPerRequest: median(samples.map((sample) => sample.cpuPerRequest)),
    p99: median(samples.map((sample) => sample.latencyP99)),
    serverCpu: median(samples.map((sample) => sample.serverCpu)),
    clientCpu: median(samples.map((sample) => sample.clientCpu)),
    cpu0Busy: median(samples.map((sample) => sample.cpu0Busy)),
    cpu1Busy: median(samples.map((sample) => sample.cpu1Busy)),
    failures: samples.reduce((sum, sample) => sum + sample.failures, 0),
  };
}

/**
 * Both scenarios in the same processes, one round at a time: state first
 * (it adds no history), then chat. Returns the results of `ids`, in order.
 */
export async function throughputScenarios(context: Context, ids: ReadonlyArray<'chat' | 'state'>): Promise<ScenarioResult[]> {
  const names = ids.includes('chat') ? [...ALL, NO_TURN] : ALL;
  context.log(`${ids.join(' + ')}: ${names.length} contenders x ${context.settings.rounds} rounds`);
  const outcomes = await inRounds(
    context,
    names,
    context.settings.rounds,
    async (contender, name) => {
      if (name === NO_TURN) return verifyChat(contender, `${NO_TURN_PREFIX}verify-1`);
      if (ids.includes('state')) await verifyState(contender, 'verify-1');
      if (ids.includes('chat')) await verifyChat(contender, 'verify-1');
    },
    async (contender, _round, name) => {
      const results: Partial<Record<'chat' | 'state', LoadResult>> = {};
      if (name === NO_TURN) {
        results.chat = await measureLoad(context, contender, noTurnShape, 'chat, no turn');
        return results;
      }
      if (ids.includes('state')) results.state = await measureLoad(context, contender, stateShape, 'state');
      if (ids.includes('chat')) results.chat = await measureLoad(context, contender, chatShape, 'chat');
      return results;
    },
  );
  return ids.map((id) => table(context, id, id === 'chat' ? names : ALL, new Map([...outcomes].map(([name, outcome]) => [
    name,
    { error: outcome.error, samples: outcome.samples.flatMap((sample) => (sample[id] === undefined ? [] : [sample[id]])) },
  ]))));
}

function table(context: Context, id: 'chat' | 'state', names: readonly string[], outcomes: Map<string, Outcome<LoadResult>>): ScenarioResult {
  const bareSummary = summarize(outcomes.get('bare'));
  const bare = bareSummary.rate;
  const rows: Row[] = names.map((name) => {
    const outcome = outcomes.get(name);
    const info = CONTENDERS[name];
    const summary = summarize(outcome);
    const vsBare = ratio(summary.rate, bare);
    const vsNative = info?.native === undefined ? Number.NaN : ratio(summary.rate, summarize(outcomes.get(info.native)).rate);
    let goal = '';
    if (name === 'router') goal = verdict(Number.isFinite(vsBare) ? vsBare >= GOAL : undefined, '≥ 0.90× bare');
    if (info?.native !== undefined) goal = verdict(Number.isFinite(vsNative) ? vsNative >= GOAL : undefined, '≥ 0.90× native');
    return {
      contender: label(name),
      cells: outcome?.error !== undefined && outcome.samples.length === 0
        ? { rate: outcome.error }
        : {
            rate: summary.rate,
            vsBare,
            vsNative,
            cpu: summary.cpuPerRequest,
            cpuVsBare: ratio(bareSummary.cpuPerRequest, summary.cpuPerRequest),
            p99: summary.p99,
            serverCpu: summary.serverCpu,
            busy: busyText(summary),
            failures: summary.failures,
            goal,
          },
    };
  });
  return {
    id,
    title: id === 'chat' ? '1. POST /{id}/chat, JSON (requests/s)' : '2. GET /{id}/state (requests/s)',
    columns: [
      { key: 'rate', label: 'req/s (median)', format: 'int' },
      { key: 'vsBare', label: 'vs bare', format: 'ratio' },
      { key: 'vsNative', label: 'vs native', format: 'ratio' },
      { key: 'cpu', label: 'CPU µs/req', format: 'decimal' },
      { key: 'cpuVsBare', label: 'vs bare, by CPU', format: 'ratio' },
      { key: 'p99', label: 'p99 latency', format: 'ms' },
      { key: 'serverCpu', label: 'server process CPU', format: 'pct' },
      { key: 'busy', label: 'CPU 0 / CPU 1 busy', format: 'text' },
      { key: 'failures', label: 'non-2xx / errors', format: 'int' },
      { key: 'goal', label: 'goal', format: 'text' },
    ],
    rows,
    notes: [
      ...partialNotes(outcomes),
      ...(names.includes(NO_TURN)
        ? [`The last row serves \`POST /${NO_TURN_PREFIX}{i}/chat\` with the same router, through an Agent subclass whose chat() is its own (an echo, as the bare server's): the router's serving work (path, body, pool, turn timeout and cancel, JSON reply) without the agent's turn (queue, history, storage commit), which the bare server does not do either. The goal is read on the AgentRouter row, a real turn.`]
        : []),
      `${context.settings.connections} connections, ${context.settings.seconds} s per contender per round after ${context.settings.warmup} s of warm-up, median of ${context.settings.rounds} rounds; each connection uses its own 16 agent ids. Scenarios 1 and 2 share each round's processes (state measured first: it adds no history).`,
      'server process CPU: the contender\'s own CPU time over the run\'s wall time; CPU 0 / CPU 1 busy: how busy the contender\'s CPU and the load generator\'s CPU were, by anyone (kernel loopback work, other processes, hypervisor steal included), from /proc/stat. A CPU 0 well under 100% means the contender was not the bottleneck. CPU µs/req is the contender\'s CPU time per response; "vs bare, by CPU" is bare\'s CPU µs/req over the contender\'s, what the req/s ratio would be with the CPU saturated and nobody else on it (steadier than req/s on a shared machine).',
    ],
    required: ['rate'],
  };
}

