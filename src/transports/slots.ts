/**
 * A counting semaphore with abortable waits. HTTPTransport holds one slot per
 * request in flight (a stream holds it until it ends), which bounds the
 * connections it opens: Node's fetch sends one request at a time per
 * HTTP/1.1 connection, so N requests in flight never need more than N.
 */
export class Slots {
  #free: number;
  readonly #waiters = new Set<() => void>();

  constructor(size: number) {
    this.#free = size;
  }

  /** Resolves once a slot is held; rejects with the signal's reason if it aborts first. */
  acquire(signal: AbortSignal): Promise<void> {
    if (signal.aborted) return Promise.reject(signal.reason);
    if (this.#free > 0) {
      this.#free--;
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const grant = (): void => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      };
      const onAbort = (): void => {
        this.#waiters.delete(grant);
        reject(signal.reason);
      };
      this.#waiters.add(grant);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Hands the slot to the longest waiter, or frees it. */
  release(): void {
    const next = this.#waiters.values().next();
    if (next.done === true) {
      this.#free++;
      return;
    }
    this.#waiters.delete(next.value);
    next.value();
  }

  /** Requests waiting for a slot (for tests and metrics). */
  get waiting(): number {
    return this.#waiters.size;
  }
}
