import type { ServerResponse } from 'node:http';
import { LinkedList } from '../lib/linked-list.ts';

/** One response in OpenResponses: linked through its own record. */
export interface OpenResponse {
  readonly res: ServerResponse;
  older: OpenResponse | undefined;
  newer: OpenResponse | undefined;
}

/**
 * Responses not yet closed (what a server's or a plugin's close() waits for), linked through records
 * of their own: a Set costs a state request 3-4% (BENCHMARKS.md, "Goals").
 */
export class OpenResponses {
  readonly #list = new LinkedList<OpenResponse>();

  get size(): number {
    return this.#list.size;
  }

  add(res: ServerResponse): OpenResponse {
    const entry: OpenResponse = { res, older: undefined, newer: undefined };
    this.#list.push(entry);
    return entry;
  }

  /** Deleting twice does nothing the second time. */
  delete(entry: OpenResponse): void {
    this.#list.remove(entry);
  }

  /** Oldest first, as a Set's order; a copy, so that what a caller does to each response (destroying it) cannot unlink the walk. */
  list(): ServerResponse[] {
    const all: ServerResponse[] = [];
    for (let entry = this.#list.oldest; entry !== undefined; entry = entry.newer) all.push(entry.res);
    return all;
  }
}
