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
   * If `signal` aborts while waiting, this rejects at once; the slot is then
   * passed on in order when the earlier turns release.
   */
  acquire(signal?: AbortSignal): Promise<() => void> {
    const previous = this.#tail;
    let open!: () => void;
    this.#tail = new Promise<void>((resolve) => {
      open = resolve;
    });
    this.#waiting++;
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      this.#waiting--;
      open();
    };
    if (signal === undefined) return previous.then(() => release);
    return new Promise<() => void>((resolve, reject) => {
      const onAbort = (): void => {
        reject(signal.reason);
        void previous.then(release);
      };
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
      void previous.then(() => {
        signal.removeEventListener('abort', onAbort);
        if (!signal.aborted) resolve(release);
      });
    });
  }
}

/**
 * Wakes a turn when its signal aborts, so a model or action that ignores the
 * signal cannot hold the turn (and so the agent) forever; what it does later
 * is discarded. One listener per turn, removed by `dispose`: the first
 * listener on an AbortSignal costs microseconds on Node 20, so a turn adds
 * exactly one, and none to a signal that outlives it.
 */
export class AbortWatch {
  readonly #signal: AbortSignal | undefined;
  #onAbort: (() => void) | undefined;
  /** Rejects the race in progress; one at a time, so nothing piles up per chunk. */
  #reject: ((reason: unknown) => void) | undefined;

  constructor(signal: AbortSignal | undefined) {
    this.#signal = signal;
    if (signal === undefined || signal.aborted) return;
    this.#onAbort = () => this.#reject?.(signal.reason);
    signal.addEventListener('abort', this.#onAbort, { once: true });
  }

  /** Settles like `promise`, or rejects with the signal's reason as soon as it aborts. */
  race<T>(promise: Promise<T>): Promise<T> {
    const signal = this.#signal;
    if (signal === undefined) return promise;
    if (signal.aborted) return Promise.reject(signal.reason);
    return new Promise<T>((resolve, reject) => {
      this.#reject = reject;
      promise.then(resolve, reject);
    });
  }

  dispose(): void {
    if (this.#onAbort !== undefined) this.#signal?.removeEventListener('abort', this.#onAbort);
    this.#onAbort = undefined;
    this.#reject = undefined;
  }
}
