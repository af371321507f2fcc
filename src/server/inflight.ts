import type { ServerResponse } from 'node:http';
import { OpenResponses } from '../http/open-responses.ts';

/**
 * The requests a server is handling right now, so `close()` can wait for
 * them. A request counts until its handler settles (a stream: until its turn
 * is committed) and its response is flushed and closed: a socket cut any
 * earlier could lose a turn's commit or a response's last bytes (a queued
 * pipelined response included).
 */
export class InFlight {
  readonly #responses = new OpenResponses();
  #waiters: Array<() => void> = [];

  get size(): number {
    return this.#responses.size;
  }

  /** The responses still in flight, oldest first. */
  responses(): ServerResponse[] {
    return this.#responses.list();
  }

  /**
   * Tracks `res` until its handler calls the function returned (once: the
   * request is answered, a stream's turn committed) and `res` closes.
   */
  track(res: ServerResponse): () => void {
    const entry = this.#responses.add(res);
    let pending = 2;
    const done = (): void => {
      if (--pending > 0) return;
      this.#responses.delete(entry);
      if (this.#responses.size === 0) this.#wake();
    };
    // `on`, not `once`: a response closes once, and once() wraps every request's listener in two more objects.
    res.on('close', done);
    return done;
  }

  /** Resolves true once nothing is in flight, or false after `ms` (never, for Infinity). */
  idle(ms: number): Promise<boolean> {
    if (this.#responses.size === 0) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const wake = (): void => {
        if (timer !== undefined) clearTimeout(timer);
        resolve(true);
      };
      this.#waiters.push(wake);
      if (Number.isFinite(ms)) {
        timer = setTimeout(() => {
          this.#waiters = this.#waiters.filter((waiter) => waiter !== wake);
          resolve(false);
        }, ms);
      }
    });
  }

  #wake(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const wake of waiters) wake();
  }
}
