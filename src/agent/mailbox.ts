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
 * Settles like `promise`, or rejects with the signal's reason as soon as it
 * aborts: a model or action that ignores its signal cannot hold a turn (and
 * so the agent) forever. What it does later is discarded.
 */
export function untilAborted<T>(promise: Promise<T>, aborted: Promise<never> | undefined): Promise<T> {
  return aborted === undefined ? promise : Promise.race([promise, aborted]);
}

/** A promise that rejects with the signal's reason when it aborts (and never resolves). */
export function abortPromise(signal: AbortSignal | undefined): Promise<never> | undefined {
  if (signal === undefined) return undefined;
  const promise = new Promise<never>((_, reject) => {
    if (signal.aborted) reject(signal.reason);
    else signal.addEventListener('abort', () => reject(signal.reason), { once: true });
  });
  promise.catch(() => {}); // observed by the races; never an unhandled rejection
  return promise;
}
