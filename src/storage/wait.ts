/**
 * Waiting helpers shared by the storage backends: an abortable delay for
 * lock polling, its backoff, and a per-key mutex for work inside a process.
 */

/** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
export function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted === true) {
      reject(signal.reason);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Settles as `work` does, or rejects with the signal's reason as soon as it
 * aborts; `work` itself goes on, and what it settles with later is dropped.
 */
export function untilAborted<T>(work: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return work;
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    if (signal.aborted) onAbort();
    work.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

/**
 * Poll interval for a lock held elsewhere: quick at first (a turn usually
 * takes milliseconds), then capped, with jitter so waiting processes do not
 * retry in lockstep.
 */
export function backoff(attempt: number, capMs = 50): number {
  const base = Math.min(capMs, 2 * 1.6 ** attempt);
  return base / 2 + Math.random() * (base / 2);
}

interface Gate {
  waiters: Array<{ resolve: () => void; reject: (reason: unknown) => void }>;
}

/** One holder per key at a time, in arrival order. Keys with no holder cost nothing. */
export class KeyedMutex {
  readonly #gates = new Map<string, Gate>();

  /** Resolves with the release once `key` is free; an abort while waiting leaves the queue. */
  acquire(key: string, signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted === true) return Promise.reject(signal.reason);
    const gate = this.#gates.get(key);
    if (gate === undefined) {
      this.#gates.set(key, { waiters: [] });
      return Promise.resolve(this.#releaser(key));
    }
    return new Promise((resolve, reject) => {
      const waiter = {
        resolve: () => {
          signal?.removeEventListener('abort', onAbort);
          resolve(this.#releaser(key));
        },
        reject,
      };
      const onAbort = (): void => {
        const index = gate.waiters.indexOf(waiter);
        if (index >= 0) gate.waiters.splice(index, 1);
        reject(signal?.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      gate.waiters.push(waiter);
    });
  }

  /** Runs `work` while holding `key`. */
  async run<T>(key: string, work: () => Promise<T>): Promise<T> {
    const release = await this.acquire(key);
    try {
      return await work();
    } finally {
      release();
    }
  }

  #releaser(key: string): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const gate = this.#gates.get(key);
      const next = gate?.waiters.shift();
      if (next === undefined) this.#gates.delete(key);
      else next.resolve();
    };
  }
}
