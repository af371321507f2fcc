/**
 * A FIFO lock: turns on one agent run one at a time, in the order they asked.
 * Cheaper than a queue of closures: each waiter chains on the previous one's
 * promise.
 */
export class Mailbox {
  #tail: Promise<void> = Promise.resolve();
  #waiting = 0;

  /** Turns running or waiting. */
  get size(): number {
    return this.#waiting;
  }

  /**
   * Resolves with a release function once every earlier turn has released.
   * If `signal` aborts while waiting, the slot is given up and this rejects.
   */
  async acquire(signal?: AbortSignal): Promise<() => void> {
    const previous = this.#tail;
    let release!: () => void;
    this.#tail = new Promise<void>((resolve) => {
      release = resolve;
    });
    this.#waiting++;
    let released = false;
    const done = (): void => {
      if (released) return;
      released = true;
      this.#waiting--;
      release();
    };
    await previous;
    if (signal?.aborted) {
      done();
      throw signal.reason;
    }
    return done;
  }
}
