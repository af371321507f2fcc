import type { JsonObject } from '../types.ts';
import { AbortWatch } from '../lib/abort-watch.ts';
import { Mailbox } from '../lib/mailbox.ts';
import type { StorageSync } from './storage-sync.ts';
import type { Turn } from './turn.ts';

/** Gives back what a turn held of storage (its lock); a promise when the storage unlocks asynchronously. */
export type Unlock = () => void | Promise<void>;

const SETTLED: Promise<void> = Promise.resolve();

/**
 * Lets one turn at a time into an agent, in arrival order: the agent's
 * FIFO lock, then any cut action still running, then the first load, the
 * storage's own lock (serializing processes) and a catch-up with storage.
 * A turn that got in is the `holder` until it leaves.
 */
export class TurnGate<S extends JsonObject> {
  readonly #mailbox = new Mailbox();
  readonly #sync: StorageSync<S>;
  #holder: Turn<S> | undefined;
  /** Actions cut at their turn's end that are still running. */
  #abandoned = 0;
  /** Settles once every abandoned action has. */
  #abandonedSettled: Promise<void> = SETTLED;

  readonly #load: () => Promise<void>;

  constructor(sync: StorageSync<S>, load: () => Promise<void>) {
    this.#sync = sync;
    this.#load = load;
  }

  /** The turn inside now (running or committing), if any. */
  get holder(): Turn<S> | undefined {
    return this.#holder;
  }

  /** Turns inside or waiting. */
  get size(): number {
    return this.#mailbox.size;
  }

  /** Actions cut from their turns that are still running. */
  get abandoned(): number {
    return this.#abandoned;
  }

  /**
   * Lets the turn in at once when nothing needs waiting for: a free agent, no cut action running,
   * its copy current on an in-process storage (BENCHMARKS.md, "What runs"). Undefined otherwise: then `enter`.
   */
  tryEnter(turn: Turn<S>): Unlock | undefined {
    if (this.#abandoned > 0 || turn.cancel.aborted || !this.#mailbox.tryAcquire()) return undefined;
    const unlock = this.#sync.lockNow();
    if (unlock === undefined) {
      this.#mailbox.release();
      return undefined;
    }
    turn.to('loading');
    this.#admit(turn);
    return unlock;
  }

  /**
   * Waits for the turn's place, then readies the agent for it; the turn is
   * then `running`. `first` puts it ahead of every waiting turn (work that
   * belongs to the turn leaving now). Rejects, holding nothing, if the
   * turn's cancel aborts first.
   */
  async enter(turn: Turn<S>, first = false): Promise<Unlock> {
    const cancel = turn.cancel;
    cancel.throwIfAborted();
    if (!this.#mailbox.tryAcquire()) await this.#mailbox.acquire(cancel, first);
    turn.to('loading');
    let unlock: Unlock | undefined;
    try {
      if (this.#abandoned > 0 || !this.#sync.loaded) await this.#settle(turn);
      unlock = await this.#sync.lock(() => turn.signal);
      await this.#sync.refresh(false);
    } catch (error) {
      await unlock?.();
      this.#mailbox.release();
      throw error;
    }
    this.#admit(turn);
    return unlock;
  }

  #admit(turn: Turn<S>): void {
    this.#holder = turn;
    turn.baseVersion = this.#sync.version;
    turn.to('running');
  }

  /**
   * Waits, as long as the turn is not cut, for every abandoned action to end
   * (its setState would join this turn) and for the first load. A storage
   * that cannot reach its server may not answer for long: the load goes on, shared with whoever asks next.
   */
  async #settle(turn: Turn<S>): Promise<void> {
    const watch = new AbortWatch(turn.cancel);
    try {
      while (this.#abandoned > 0) await watch.race(this.#abandonedSettled);
      if (!this.#sync.loaded) await watch.race(this.#load());
    } finally {
      watch.dispose();
    }
  }

  /** Lets the next turn in once `unlock` gave the storage lock back. */
  leave(unlock: Unlock): Promise<void> | undefined {
    this.#holder = undefined;
    let unlocking: void | Promise<void>;
    try {
      unlocking = unlock();
    } catch (error) {
      this.#mailbox.release();
      throw error;
    }
    if (unlocking === undefined) {
      this.#mailbox.release();
      return undefined;
    }
    return Promise.resolve(unlocking).finally(() => this.#mailbox.release());
  }

  /**
   * Counts an action that outlived its cut turn until it settles; no turn
   * enters meanwhile, so nothing it does later can join one.
   */
  abandon(work: Promise<unknown>): void {
    this.#abandoned++;
    const settle = (): void => {
      // Back to a settled promise, so an instance cut many times keeps no chain of them.
      if (--this.#abandoned === 0) this.#abandonedSettled = SETTLED;
    };
    const settled = work.then(settle, settle);
    this.#abandonedSettled = Promise.all([this.#abandonedSettled, settled]).then(() => undefined);
  }

  /** Resolves once the turns queued now have run (AgentServer's close() waits for it). */
  drained(): Promise<void> {
    return this.#mailbox.acquire().then(() => this.#mailbox.release());
  }
}
