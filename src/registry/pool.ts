import { turnsDone, type Agent } from '../agent/agent.ts';
import { AgentRouterError } from '../errors.ts';
import { loggerOf, type Log, type Logger } from '../lib/logger.ts';
import { LinkedList } from '../lib/linked-list.ts';

export interface AgentPoolOptions {
  /**
   * Seconds an instance may stay idle (no request running, no stream open)
   * before it is dropped; its state stays in storage. 0 or Infinity: never.
   * @defaultValue 300
   */
  idleTimeout?: number | undefined;
  /**
   * Live instances at most. At the cap the least recently used idle one is
   * dropped to make room; if none is idle, the request gets 429.
   * @defaultValue 10000
   */
  maxAgents?: number | undefined;
  /** Called with each instance the pool creates; may be async (not awaited). */
  onCreate?: ((agent: Agent<any>) => unknown) | undefined;
  /** Called with each instance the pool drops, and why; may be async (not awaited). */
  onEvict?: ((agent: Agent<any>, reason: EvictReason) => unknown) | undefined;
  /** Where a hook's failure is reported. @defaultValue console */
  logger?: Logger | undefined;
  /** Milliseconds now; injectable for tests. @defaultValue Date.now @internal */
  now?: (() => number) | undefined;
}

export type EvictReason = 'idle' | 'capacity' | 'manual' | 'close' | 'abandoned';

export interface LiveAgentInfo {
  id: string;
  /** ISO time of the last request's end (or start, while one runs). */
  lastActivity: string;
  /** A request or stream is running on it now. */
  busy: boolean;
}

interface Entry {
  id: string;
  agent: Agent<any>;
  /** Requests (and open streams) running on this instance. */
  active: number;
  lastUsed: number;
  /** Neighbours in least-recently-used order. */
  older: Entry | undefined;
  newer: Entry | undefined;
}

/**
 * The live agent instances of one router: one per id, created on first use, dropped when idle too long
 * or to make room. Linked oldest use first, so the sweep and eviction look at the oldest only.
 */
export class AgentPool {
  readonly idleTimeout: number;
  readonly maxAgents: number;
  readonly #entries = new Map<string, Entry>();
  /** The same entries, least recently used first. */
  readonly #lru = new LinkedList<Entry>();
  readonly #now: () => number;
  readonly #onCreate: AgentPoolOptions['onCreate'];
  readonly #onEvict: AgentPoolOptions['onEvict'];
  readonly #logger: Log;
  #timer: NodeJS.Timeout | undefined;

  constructor(options: AgentPoolOptions = {}) {
    this.idleTimeout = positive(options.idleTimeout ?? 300, 'idleTimeout');
    this.maxAgents = options.maxAgents ?? 10_000;
    if (!Number.isSafeInteger(this.maxAgents) || this.maxAgents < 1) {
      throw new TypeError(`AgentPool: maxAgents must be a whole number >= 1, got ${String(this.maxAgents)}`);
    }
    this.#now = options.now ?? Date.now;
    this.#onCreate = options.onCreate;
    this.#onEvict = options.onEvict;
    this.#logger = loggerOf(options.logger);
  }

  get size(): number {
    return this.#entries.size;
  }

  /**
   * The instance for `id`, created with `create` if not live, marked busy
   * until `release(id)`. Throws 429 when at the cap with nothing idle.
   */
  acquire(id: string, create: (id: string) => Agent<any>): Agent<any> {
    let entry = this.#entries.get(id);
    // An instance whose cut action still runs is retired: new turns get a fresh one, loaded from storage.
    if (entry !== undefined && entry.agent.abandoned && !this.#isBusy(entry)) {
      this.#drop(id, entry, 'abandoned');
      entry = undefined;
    }
    if (entry === undefined) {
      if (this.#entries.size >= this.maxAgents && this.#oldestIdle() === undefined) {
        throw new AgentRouterError(429, 'too_many_agents', `All ${this.maxAgents} live agents are busy; retry shortly`, {
          headers: { 'Retry-After': '1' },
        });
      }
      // Made before the eviction: a constructor that throws must not cost a live agent its place.
      const agent = create(id);
      // Looked up again: a constructor may have used this pool itself.
      const idle = this.#entries.size >= this.maxAgents ? this.#oldestIdle() : undefined;
      if (idle !== undefined) this.#drop(idle.id, idle, 'capacity');
      entry = { id, agent, active: 0, lastUsed: 0, older: undefined, newer: undefined };
      this.#entries.set(id, entry);
      this.#lru.push(entry);
      this.#callHook(this.#onCreate, entry.agent, undefined);
      this.#startSweeping();
    } else {
      this.#touch(entry);
    }
    entry.active++;
    entry.lastUsed = this.#now();
    return entry.agent;
  }

  /** Ends one use begun with `acquire`. */
  release(id: string): void {
    const entry = this.#entries.get(id);
    if (entry === undefined) return;
    // A release with no acquire left (a caller's extra one) must not make the next acquire's instance look idle.
    if (entry.active > 0) entry.active--;
    entry.lastUsed = this.#now();
    this.#touch(entry);
  }

  /** The live instance for `id`, if any, without creating or touching it. */
  peek(id: string): Agent<any> | undefined {
    return this.#entries.get(id)?.agent;
  }

  /** Drops one live instance on purpose; false if it is not live or is busy. */
  evict(id: string): boolean {
    const entry = this.#entries.get(id);
    if (entry === undefined || this.#isBusy(entry)) return false;
    this.#drop(id, entry, 'manual');
    return true;
  }

  /** Drops every instance idle longer than `idleTimeout`; returns how many. */
  sweep(): number {
    if (!Number.isFinite(this.idleTimeout) || this.idleTimeout === 0) return 0;
    const cutoff = this.#now() - this.idleTimeout * 1000;
    let dropped = 0;
    for (let entry = this.#lru.oldest, newer; entry !== undefined; entry = newer) {
      newer = entry.newer;
      if (entry.lastUsed > cutoff) break; // the rest were used more recently
      if (this.#isBusy(entry)) continue;
      this.#drop(entry.id, entry, 'idle');
      dropped++;
    }
    if (this.#entries.size === 0) this.#stopSweeping();
    return dropped;
  }

  list(): LiveAgentInfo[] {
    const agents: LiveAgentInfo[] = [];
    for (let entry = this.#lru.oldest; entry !== undefined; entry = entry.newer) {
      agents.push({ id: entry.id, lastActivity: new Date(entry.lastUsed).toISOString(), busy: this.#isBusy(entry) });
    }
    return agents;
  }

  /**
   * Resolves once the busy instances' queued turns have run, or after `ms`:
   * turns no request waits on any more (a failed chat's carried updates)
   * are stored before `clear()` drops the instances.
   */
  async settle(ms: number): Promise<void> {
    const busy = [...this.#entries.values()].filter((entry) => entry.agent.busy).map((entry) => entry.agent[turnsDone]());
    if (busy.length === 0) return;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
    await Promise.race([Promise.all(busy), late]);
    clearTimeout(timer);
  }

  /** Stops the sweep timer and forgets every instance (their state is in storage). */
  clear(): void {
    this.#stopSweeping();
    for (const [id, entry] of this.#entries) this.#drop(id, entry, 'close');
  }

  /**
   * A request in flight, or a turn of the agent's own. While a cut action
   * still runs no turn can (each waits for it), so an instance's waiting
   * turns do not keep it: one such is that action's own `this.chat()`, which
   * waits for it as it waits for the chat, and would hold the id forever.
   * Dropped, those turns still run on it if the action ends, through the
   * storage's lock like any second instance's.
   */
  #isBusy(entry: Entry): boolean {
    return entry.active > 0 || (entry.agent.busy && !entry.agent.abandoned);
  }

  /** The least recently used instance that is not busy: the one to drop for room. */
  #oldestIdle(): Entry | undefined {
    for (let entry = this.#lru.oldest; entry !== undefined; entry = entry.newer) if (!this.#isBusy(entry)) return entry;
    return undefined;
  }

  #drop(id: string, entry: Entry, reason: EvictReason): void {
    this.#entries.delete(id);
    this.#lru.remove(entry);
    this.#callHook(this.#onEvict, entry.agent, reason);
  }

  /** Makes `entry` the most recently used. */
  #touch(entry: Entry): void {
    if (entry === this.#lru.newest) return;
    this.#lru.remove(entry);
    this.#lru.push(entry);
  }

  #startSweeping(): void {
    if (this.#timer !== undefined || !Number.isFinite(this.idleTimeout) || this.idleTimeout === 0) return;
    // Sweep often enough that an instance outlives its timeout by at most ~25%.
    const every = Math.min(Math.max(this.idleTimeout * 250, 100), 60_000);
    this.#timer = setInterval(() => this.sweep(), every);
    this.#timer.unref();
  }

  /**
   * A user hook that throws, or rejects, must not break the pool: the sweep
   * runs on a timer, where either would crash the process.
   */
  #callHook<R>(hook: ((agent: Agent<any>, reason: R) => unknown) | undefined, agent: Agent<any>, reason: R): void {
    const report = (error: unknown): void => this.#logger.error(`AgentPool: a lifecycle hook failed for agent ${JSON.stringify(agent.id)}`, error, { agentId: agent.id });
    try {
      const result = hook?.(agent, reason);
      if (result instanceof Promise) result.catch(report);
    } catch (error) {
      report(error);
    }
  }

  #stopSweeping(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }
}


function positive(value: number, name: string): number {
  if (typeof value !== 'number' || Number.isNaN(value) || value < 0) {
    throw new TypeError(`AgentPool: ${name} must be a number >= 0, got ${String(value)}`);
  }
  return value;
}
