import type { ServerResponse } from 'node:http';

/** One response in OpenResponses: linked through its own record. */
export interface OpenResponse {
  readonly res: ServerResponse;
  /** In the list now: deleting twice does nothing the second time. */
  listed: boolean;
  older: OpenResponse | undefined;
  newer: OpenResponse | undefined;
}

/**
 * Responses not yet closed (what a server's or a plugin's close() waits
 * for), as a list linked through records of their own rather than a Set: a
 * Set keyed by a new response on every request makes V8 give each one an
 * identity hash and a table slot (RunningTurns avoids the same for the
 * router's turns). Measured in memory (scripts/bench/ab.ts --host=fastify),
 * the plugin's Set was 3-4% of a state request's CPU.
 */
export class OpenResponses {
  #newest: OpenResponse | undefined;
  #size = 0;

  get size(): number {
    return this.#size;
  }

  add(res: ServerResponse): OpenResponse {
    const entry: OpenResponse = { res, listed: true, older: this.#newest, newer: undefined };
    if (this.#newest !== undefined) this.#newest.newer = entry;
    this.#newest = entry;
    this.#size++;
    return entry;
  }

  delete(entry: OpenResponse): void {
    if (!entry.listed) return;
    entry.listed = false;
    const { older, newer } = entry;
    if (older !== undefined) older.newer = newer;
    if (newer !== undefined) newer.older = older;
    else this.#newest = older;
    // Unlinked both ways: a response held elsewhere must not keep its neighbours alive.
    entry.older = entry.newer = undefined;
    this.#size--;
  }

  /** Oldest first, as a Set's order; a copy, so that what a caller does to each response (destroying it) cannot unlink the walk. */
  list(): ServerResponse[] {
    const all: ServerResponse[] = [];
    for (let entry = this.#newest; entry !== undefined; entry = entry.older) all.push(entry.res);
    return all.reverse();
  }
}
