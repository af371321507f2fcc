/**
 * Scenario 6: heap per idle live agent, and what is left per agent after
 * eviction. N agents get one chat turn each through the router's pool, then
 * are evicted (as the idle sweep would); heap is read after full GCs.
 */
import { Contender } from '../lib/contender.ts';
import { RawConnection, requestBytes } from '../lib/raw-http.ts';
import { CHAT_MESSAGE } from '../lib/protocol.ts';
import type { Row, ScenarioResult } from '../lib/report.ts';
import { median, sleep } from '../lib/stats.ts';
import { verifyChat } from '../lib/verify.ts';
import { inRounds, label, partialNotes, type Context } from './common.ts';

const NAMES = ['bare', 'router'];

interface Sample {
  live: number;
  perLive: number;
  afterEviction: number;
  remaining: number;
}

async function chatMany(contender: Contender, prefix: string, count: number): Promise<void> {
  const body = JSON.stringify({ message: CHAT_MESSAGE });
  const connections = await Promise.all(Array.from({ length: 8 }, () => RawConnection.connect(contender.port)));
  let next = 0;
  await Promise.all(connections.map(async (connection) => {
    while (next < count) {
      const timing = await connection.request(requestBytes('POST', `${contender.prefix}/${prefix}${next++}/chat`, contender.port, body));
      if (timing.status !== 200) throw new Error(`chat answered ${timing.status}: ${timing.body.slice(0, 120)}`);
    }
    connection.close();
  }));
}

async function measure(context: Context, contender: Contender): Promise<Sample> {
  const count = context.settings.agents;
  // Warm-up (JIT, lazily built structures), evicted again before the baseline.
  await chatMany(contender, 'warm-', Math.min(500, count));
  await contender.evict();
  await sleep(100);
  const before = await contender.heap();
  await chatMany(contender, 'agent-', count);
  await sleep(100);
  const live = await contender.count();
  const loaded = await contender.heap();
  const remaining = await contender.evict();
  const after = await contender.heap();
  const sample = {
    live,
    perLive: (loaded.heapUsed - before.heapUsed) / count,
    afterEviction: (after.heapUsed - before.heapUsed) / count,
    remaining,
  };
  context.log(`  ${contender.name}: ${live} live, ${Math.round(sample.perLive)} B each; ${Math.round(sample.afterEviction)} B each after eviction (${remaining} left)`);
  return sample;
}

export async function agentsScenario(context: Context): Promise<ScenarioResult> {
  const rounds = Math.min(context.settings.rounds, 3);
  const count = context.settings.agents;
  context.log(`agents: ${NAMES.length} contenders x ${rounds} rounds x ${count} agents`);
  const outcomes = await inRounds(context, NAMES, rounds, (contender) => verifyChat(contender, 'verify-1'), (contender) => measure(context, contender));
  const rows: Row[] = NAMES.map((name) => {
    const outcome = outcomes.get(name);
    if (outcome?.error !== undefined && outcome.samples.length === 0) return { contender: label(name), cells: { live: outcome.error } };
    const pick = (key: keyof Sample): number => median((outcome?.samples ?? []).map((sample) => sample[key]));
    return {
      contender: name === 'bare' ? 'bare node:http (a state object per id)' : label(name),
      cells: { live: pick('live'), perLive: pick('perLive'), afterEviction: pick('afterEviction'), remaining: pick('remaining') },
    };
  });
  return {
    id: 'agents',
    title: `6. Heap per idle live agent, and after eviction (${count.toLocaleString('en-US')} agents)`,
    columns: [
      { key: 'live', label: 'live after the turns', format: 'int' },
      { key: 'perLive', label: 'heap per live agent', format: 'bytes' },
      { key: 'afterEviction', label: 'heap per agent after eviction', format: 'bytes' },
      { key: 'remaining', label: 'live after eviction', format: 'int' },
    ],
    rows,
    notes: [
      ...partialNotes(outcomes),
      `Each of ${count.toLocaleString('en-US')} ids gets one \`POST /{id}/chat\` turn (8 connections), then every live agent is evicted through the pool (\`pool.evict(id)\`, what the idle sweep does). Heap growth after two full GCs, divided by the agents, median of ${rounds} rounds.`,
      'After eviction the agent\'s record (state and the turn\'s two messages) stays in the default MemoryStorage by design (DESIGN.md: "its state stays in storage"): that record, and the registry\'s id cache (up to 10,000 ids), are what remains per agent.',
      'The bare row keeps one small state object per id and "evicts" by clearing its Map: a floor for per-id bookkeeping, not the same work.',
    ],
    required: ['perLive', 'afterEviction'],
  };
}
