import { stopWatching, whenAborted } from './signal-watch.ts';
import type { TraceLink } from './trace.ts';

/**
 * A turn's cancellation: a flag, plain-function hooks, and an AbortSignal made only when something
 * asks for one (a model handing it to fetch): an AbortController per turn costs a JSON chat 5% (BENCHMARKS.md, "Goals").
 */
export class TurnCancel {
  #aborted = false;
  #reason: unknown;
  /** The first hook, kept without a Set: a turn usually has one. */
  #hook: ((reason: unknown) => void) | undefined;
  #hooks: Set<(reason: unknown) => void> | undefined;
  /** What each hook listens with on a caller's signal. */
  #outerListeners: Map<(reason: unknown) => void, () => void> | undefined;
  #controller: AbortController | undefined;
  /** What `signal` handed out, once asked for. */
  #signal: AbortSignal | undefined;
  /** A caller's signal this cancel follows (and hands out as its `signal`). */
  readonly #outer: AbortSignal | undefined;
  /** Told each phase the turn run under this cancel moves to (the router's turn hooks and metrics); unset when off. */
  watcher: TurnWatcher | undefined;
  /** Where the turn stands in its trace (model and tool spans, headers sent on); unset with no tracer and no traceparent. */
  trace: TraceLink | undefined;

  constructor(outer?: AbortSignal) {
    this.#outer = outer;
  }

  get aborted(): boolean {
    return this.#aborted || this.#outer?.aborted === true;
  }

  get reason(): unknown {
    return this.#aborted ? this.#reason : this.#outer?.reason;
  }

  /**
   * A signal made now, aborted with this cancel, and with the caller's signal
   * it follows, if any. Not the caller's own: this cancel also aborts by
   * itself (a stream's consumer leaving its loop), and a model holding only
   * the caller's signal, which never aborts then, would go on generating (a
   * provider request running to its end). `AbortSignal.any` puts no
   * listener on the caller's signal.
   */
  get signal(): AbortSignal {
    if (this.#signal === undefined) {
      const controller = new AbortController();
      if (this.#aborted) controller.abort(this.#reason);
      this.#controller = controller;
      this.#signal = this.#outer === undefined ? controller.signal : AbortSignal.any([this.#outer, controller.signal]);
    }
    return this.#signal;
  }

  throwIfAborted(): void {
    if (this.aborted) throw this.reason;
  }

  /** Aborts this cancel (not a caller's signal it follows); hooks run once. */
  abort(reason: unknown): void {
    if (this.aborted) return;
    this.#aborted = true;
    this.#reason = reason;
    this.#controller?.abort(reason);
    this.#fire();
  }

  /**
   * Calls `hook` with the reason once when this cancel or the signal it
   * follows aborts (not if it already has: check `aborted` first). `offAbort` stops it: a method,
   * not a returned closure, since a held stream keeps what its turn watches with.
   */
  onAbort(hook: (reason: unknown) => void): void {
    if (this.#hook === undefined && this.#hooks === undefined) this.#hook = hook;
    else (this.#hooks ??= new Set()).add(hook);
    const outer = this.#outer;
    if (outer === undefined) return;
    // Watched per hook, and each stopped once done: the caller's signal is theirs, and may outlive the turn.
    const onOuterAbort = (): void => {
      if (this.#forget(hook)) hook(outer.reason);
    };
    (this.#outerListeners ??= new Map()).set(hook, onOuterAbort);
    whenAborted(outer, onOuterAbort);
  }

  /** Stops calling `hook` (see onAbort). */
  offAbort(hook: (reason: unknown) => void): void {
    this.#forget(hook);
    const listener = this.#outerListeners?.get(hook);
    if (listener === undefined) return;
    this.#outerListeners?.delete(hook);
    if (this.#outer !== undefined) stopWatching(this.#outer, listener);
  }

  /** Removes `hook`; true if it was there. */
  #forget(hook: (reason: unknown) => void): boolean {
    if (this.#hook === hook) {
      this.#hook = undefined;
      return true;
    }
    return this.#hooks?.delete(hook) === true;
  }

  #fire(): void {
    const first = this.#hook;
    const hooks = this.#hooks;
    this.#hook = undefined;
    this.#hooks = undefined;
    const reason = this.#reason;
    first?.(reason);
    if (hooks !== undefined) for (const hook of hooks) hook(reason);
  }
}

/** Watches a turn's phases (a Turn of src/agent, seen from below as any object). */
export interface TurnWatcher {
  turnPhase(turn: object, phase: string): void;
}

/** What a wait can be cut by: a TurnCancel, or anything shaped like one. */
export type Cancellable = Pick<TurnCancel, 'aborted' | 'reason' | 'onAbort' | 'offAbort'>;
