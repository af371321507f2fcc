import type { Cancellable } from './cancel.ts';
import { LinkedList } from './linked-list.ts';

interface Waiter {
  /** Hands the mailbox to this waiter; undefined once it was handed over or gave up. */
  grant: (() => void) | undefined;
  /** What cuts the wait, and the hook it calls. */
  cancel: Cancellable | undefined;
  onAbort: (() => void) | undefined;
  older: Waiter | undefined;
  newer: Waiter | undefined;
}

/**
 * A FIFO lock: turns on one agent run one at a time, in the order they asked.
 * A free mailbox is taken at once, with no promise and no abort listener:
 * that is the common case, one turn at a time per agent. Its holder gives it
 * back with `release()`, a method rather than a function handed out per
 * hold: a turn held open (a stream) keeps nothing of it.
 */
export class Mailbox {
  #held = false;
  /** Waiters in arrival order: one aborted while waiting leaves at once, and keeps nothing of the request here. */
  readonly #waiters = new LinkedList<Waiter>();
  #size = 0;

  /** Turns running or waiting. */
  get size(): number {
    return this.#size;
  }

  /** Takes the mailbox if it is free (true), else false. */
  tryAcquire(): boolean {
    if (this.#held) return false;
    this.#held = true;
    this.#size++;
    return true;
  }

  /**
   * Resolves once every earlier holder has released; the mailbox is then this caller's.
   * If `cancel` aborts while waiting, this rejects at once and the waiter
   * gives up its place. `first` puts the caller ahead of every waiter (work
   * that belongs to the turn now holding the mailbox).
   */
  acquire(cancel?: Cancellable, first = false): Promise<void> {
    if (cancel?.aborted === true) return Promise.reject(cancel.reason);
    if (this.tryAcquire()) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = { grant: resolve, cancel, onAbort: undefined, older: undefined, newer: undefined };
      if (first) this.#waiters.unshift(waiter);
      else this.#waiters.push(waiter);
      this.#size++;
      if (cancel === undefined) return;
      waiter.onAbort = () => {
        if (waiter.grant === undefined) return;
        waiter.grant = undefined;
        this.#waiters.remove(waiter);
        this.#size--;
        reject(cancel.reason);
      };
      cancel.onAbort(waiter.onAbort);
    });
  }

  /** Gives the mailbox up, to the next waiter still waiting. Only its holder calls this, once per hold. */
  release(): void {
    if (!this.#held) return;
    this.#size--;
    this.#handOver();
  }

  /** Gives the lock to the next waiter (every one in the list still waits), or frees it. */
  #handOver(): void {
    const waiter = this.#waiters.oldest;
    if (waiter === undefined) {
      this.#held = false;
      return;
    }
    this.#waiters.remove(waiter);
    const grant = waiter.grant as () => void;
    waiter.grant = undefined;
    if (waiter.onAbort !== undefined) waiter.cancel?.offAbort(waiter.onAbort);
    grant();
  }
}
