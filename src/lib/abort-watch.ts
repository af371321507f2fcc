import type { Cancellable } from './cancel.ts';

/**
 * Wakes a turn when its signal aborts, so a model or action that ignores the
 * signal cannot hold the caller's answer; what it does later is discarded.
 * (A model's late chunks are dropped; an action that carries on keeps the
 * agent's next turn waiting until it ends: see Agent#watchAbandoned.) One
 * watch per turn, removed by `dispose`, and none left on a signal that
 * outlives the turn.
 */
export class AbortWatch {
  readonly #cancel: Cancellable | undefined;
  readonly #onAbort: (() => void) | undefined;
  /** Rejects the race in progress; one at a time, so nothing piles up per chunk. */
  #reject: ((reason: unknown) => void) | undefined;

  /** Without a cancel (nothing can cut the turn from outside), races are the promises themselves. */
  constructor(cancel: Cancellable | undefined) {
    this.#cancel = cancel;
    if (cancel === undefined || cancel.aborted) return;
    this.#onAbort = () => this.#reject?.(cancel.reason);
    cancel.onAbort(this.#onAbort);
  }

  /** Settles like `promise`, or rejects with the cancel's reason as soon as it aborts. */
  race<T>(promise: Promise<T>): Promise<T> {
    const cancel = this.#cancel;
    if (cancel === undefined) return promise;
    if (cancel.aborted) return Promise.reject(cancel.reason);
    return new Promise<T>((resolve, reject) => {
      this.#reject = reject;
      promise.then(resolve, reject);
    });
  }

  dispose(): void {
    if (this.#onAbort !== undefined) this.#cancel?.offAbort(this.#onAbort);
    this.#reject = undefined;
  }
}
