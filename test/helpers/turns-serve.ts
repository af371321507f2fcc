import type { TestContext } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { scriptedModel } from '../../src/models/scripted.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentRouter, type AgentRouterOptions } from '../../src/router/router.ts';
import { readSSE, type SSEEvent } from '../../src/sse/parser.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import type { Storage } from '../../src/storage/storage.ts';
import { listen } from './listen.ts';

/** Chunks a test lets out one at a time: `release(n)` lets the next n go. */
export class Steps {
  #released = 0;
  #waiters: Array<{ index: number; resolve: () => void }> = [];

  wait(index: number): Promise<void> {
    if (index < this.#released) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push({ index, resolve }));
  }

  release(n = Infinity): void {
    this.#released += n;
    const ready = this.#waiters.filter((w) => w.index < this.#released);
    this.#waiters = this.#waiters.filter((w) => w.index >= this.#released);
    for (const w of ready) w.resolve();
  }
}

/** A registry router whose agents reply with `words`, each chunk let out by `steps` (all at once when none), on `storage` (a new MemoryStorage when none). */
export async function serveWords(t: TestContext, words: string[], options: AgentRouterOptions = {}, steps?: Steps, storage?: Storage) {
  const served = wordsRouter(words, options, steps, storage);
  const router = served.router;
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  return { url, router, storage: served.storage };
}

/** serveWords' router, not listening: for a test that serves it behind a listener of its own. */
export function wordsRouter(words: string[], options: AgentRouterOptions = {}, steps?: Steps, storage: Storage = new MemoryStorage()) {
  const model = scriptedModel(() =>
    (async function* () {
      for (let i = 0; i < words.length; i++) {
        if (steps !== undefined) await steps.wait(i);
        yield words[i] as string;
      }
    })(),
  );
  class Bot extends Agent {
    constructor(id: string) {
      super(id, { model, storage });
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Bot);
  const router = new AgentRouter(registry, { logger: { error: () => {} }, ...options });
  return { router, storage };
}

/** Reads a stream's events one by one. */
export function eventsOf(res: Response): AsyncGenerator<SSEEvent> {
  return readSSE(res.body as ReadableStream<Uint8Array>);
}

/** The next `n` events of a stream. */
export async function take(events: AsyncGenerator<SSEEvent>, n: number): Promise<SSEEvent[]> {
  const got: SSEEvent[] = [];
  while (got.length < n) {
    const next = await events.next();
    if (next.done === true) break;
    got.push(next.value);
  }
  return got;
}

/** Every event left in a stream. */
export async function rest(events: AsyncGenerator<SSEEvent>): Promise<SSEEvent[]> {
  return take(events, Infinity);
}

export function rejoinUrl(url: string, agentId: string, turnId: string, query = ''): string {
  return `${url}/${agentId}/turns/${turnId}/events${query}`;
}
