/**
 * Memory cost of live idle agents in an AgentPool (issue 3's goal: at most
 * 2 KB per idle agent without history, and the heap back within 5% of where
 * it was once they are all evicted).
 *
 *   node --expose-gc --import tsx scripts/bench-agents.ts [count] [rounds]
 *
 * What runs: `count` (default 10,000) agents of one Agent subclass (echo
 * model, one shared MemoryStorage, initialState {count: 0}, ids like
 * "user-123") are created through `pool.acquire` + `release`, as the router
 * does, then the heap is measured after two forced GCs; then every agent is
 * evicted and the heap is measured again. Three shapes:
 *   - created:  acquired and released, never used (no storage read)
 *   - loaded:   plus one `snapshot()` each, as after a GET /state (state read
 *               from storage, nothing stored, so no history)
 *   - resolved: created, with `registry.resolve(id)` first as the router does;
 *               the registry remembers up to 10,000 resolved ids, so this one
 *               shows that cache's share, which stays after eviction (it is
 *               bounded, and the ids would come back with their agents).
 * Each shape runs `rounds` (default 5) times, alternating shapes; medians are
 * printed. A warm-up round runs first so compiled code and hidden classes are
 * in the baseline. What it ignores: storage memory (records live in the
 * shared MemoryStorage either way; none are written here), the HTTP layer,
 * and V8's RSS (only the JS heap, `heapUsed`, is measured).
 */
import { Agent } from '../src/agent/agent.ts';
import { echoModel } from '../src/models/echo.ts';
import { AgentRegistry } from '../src/registry/registry.ts';
import { AgentPool } from '../src/registry/pool.ts';
import { MemoryStorage } from '../src/storage/memory.ts';

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) {
  console.error('bench-agents: run with node --expose-gc --import tsx scripts/bench-agents.ts');
  process.exit(1);
}
const count = Number(process.argv[2] ?? 10_000);
const rounds = Number(process.argv[3] ?? 5);

const storage = new MemoryStorage();
const model = echoModel();
class Counter extends Agent<{ count: number }> {
  static override actions = ['increment'];
  constructor(id: string) {
    super(id, { model, storage, initialState: { count: 0 } });
  }
  async increment(): Promise<number> {
    await this.setState({ count: this.state.count + 1 });
    return this.state.count;
  }
}
const registry = new AgentRegistry();
registry.register('user-[0-9]+', Counter);

type Shape = 'created' | 'loaded' | 'resolved';

async function heap(): Promise<number> {
  // Two passes and a turn of the event loop: finalizers and weak refs settle.
  (gc as () => void)();
  await new Promise((resolve) => setImmediate(resolve));
  (gc as () => void)();
  return process.memoryUsage().heapUsed;
}

async function round(shape: Shape, n: number): Promise<{ perAgent: number; after: number; retained: number; before: number }> {
  const pool = new AgentPool({ idleTimeout: 0, maxAgents: n + 1 });
  const ids: string[] = [];
  registry.register('reset-cache', Counter); // register clears the resolution cache: each round starts empty
  const before = await heap();
  for (let i = 0; i < n; i++) {
    const id = `user-${i}`;
    if (shape === 'resolved') registry.resolve(id);
    const agent = pool.acquire(id, (agentId) => new Counter(agentId));
    if (shape === 'loaded') await agent.snapshot();
    pool.release(id);
    ids.push(id);
  }
  const live = await heap();
  if (pool.size !== n) throw new Error(`expected ${n} live agents, got ${pool.size}`);
  for (const id of ids) pool.evict(id);
  ids.length = 0;
  const after = await heap();
  return { perAgent: (live - before) / n, after: (after - before) / before, retained: after - before, before };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

await round('loaded', 1_000); // warm-up
const shapes: Shape[] = ['created', 'loaded', 'resolved'];
interface Samples {
  perAgent: number[];
  after: number[];
  retained: number[];
  before: number[];
}
const results = new Map<Shape, Samples>(shapes.map((shape) => [shape, { perAgent: [], after: [], retained: [], before: [] }]));
for (let r = 0; r < rounds; r++) {
  for (const shape of r % 2 === 0 ? shapes : [...shapes].reverse()) {
    const sample = await round(shape, count);
    const samples = results.get(shape) as Samples;
    for (const key of ['perAgent', 'after', 'retained', 'before'] as const) samples[key].push(sample[key]);
  }
}

console.log(`bench-agents: ${count} idle agents per round, ${rounds} rounds, Node ${process.version}`);
for (const shape of shapes) {
  const { perAgent, after, retained, before } = results.get(shape) as Samples;
  const kb = (median(perAgent) / 1024).toFixed(2);
  const back = (median(after) * 100).toFixed(2);
  const left = (median(retained) / 1024).toFixed(0);
  const base = (median(before) / 1024 / 1024).toFixed(1);
  console.log(
    `  ${shape.padEnd(9)} ${kb} KB per live idle agent (goal <= 2 KB); after evicting all: ${back}% above the heap before ` +
      `(${left} KB over ${base} MB; goal within 5%)`,
  );
}
