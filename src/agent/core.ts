import { AgentRouterError } from '../errors.ts';
import type { Storage } from '../storage/storage.ts';
import type { ChatMessage, JsonObject } from '../types.ts';
import { TurnCancel } from '../lib/cancel.ts';
import { TurnGate, type Unlock } from './gate.ts';
import { assertJsonState } from '../lib/json.ts';
import { AbortWatch } from '../lib/abort-watch.ts';
import { StorageSync } from './storage-sync.ts';
import { Turn, type StateUpdate } from './turn.ts';

/**
 * What an Agent is made of behind its public face: its copy of the stored
 * record, the gate its turns go through, and how a turn of user code (an
 * action, a setState) runs and commits. The chat engine drives the same
 * pieces for a chat turn.
 */
export class AgentCore<S extends JsonObject> {
  readonly id: string;
  readonly sync: StorageSync<S>;
  readonly gate: TurnGate<S>;

  /** `load` is the agent's own load(), which checks the agent before the first read. */
  constructor(id: string, storage: Storage, initialState: S, load: () => Promise<void>) {
    this.id = id;
    this.sync = new StorageSync(id, storage, initialState, () => this.gate.abandoned > 0);
    this.gate = new TurnGate(this.sync, load);
  }

  /** The state as the turn inside sees it (its own changes included), else the committed one. */
  get state(): S {
    return this.gate.holder?.staged ?? this.sync.state;
  }

  /**
   * Runs `body` (an action, or setState's update) as a turn: it enters, the
   * body runs raced against the turn's cancel, its staged state commits. A
   * body that outlives its cut turn is counted until it ends (see TurnGate.abandon).
   */
  async runTurn<T>(turn: Turn<S>, body: () => Promise<T>, first = false): Promise<T> {
    let unlock: Unlock;
    try {
      unlock = this.gate.tryEnter(turn) ?? (await this.gate.enter(turn, first));
    } catch (error) {
      turn.fail();
      throw error;
    }
    const watch = new AbortWatch(turn.cancel);
    const work = body();
    let settled = false;
    const markSettled = (): void => {
      settled = true;
    };
    work.then(markSettled, markSettled);
    try {
      const result = await watch.race(work);
      turn.to('committing');
      const committing = this.commit(turn, []);
      if (committing !== undefined) await committing;
      turn.to('done');
      return result;
    } catch (error) {
      // Before the gate lets anyone in: no turn or read may meet the state as the failed code left it.
      this.sync.unsure = true;
      turn.fail();
      throw error;
    } finally {
      watch.dispose();
      if (!settled) this.gate.abandon(work);
      await this.leave(turn, unlock);
    }
  }

  /**
   * Stores the turn's state and the messages it adds; the carried updates it held are then done with.
   * A promise only when the storage answers asynchronously.
   */
  commit(turn: Turn<S>, append: ChatMessage[]): Promise<void> | undefined {
    turn.carriedInCommit = turn.carried?.length ?? 0;
    const writing = this.sync.commit(turn.staged ?? this.sync.state, append, turn.baseVersion);
    if (writing === undefined) return this.#committed(turn);
    return writing.then(() => this.#committed(turn));
  }

  #committed(turn: Turn<S>): undefined {
    const carried = turn.carried;
    if (carried !== undefined) turn.carried = carried.length > turn.carriedInCommit ? carried.slice(turn.carriedInCommit) : undefined;
    return undefined;
  }

  /**
   * Lets the next turn in. setState calls the turn carried but did not
   * store go first, as a turn of their own (see applyCarried).
   */
  leave(turn: Turn<S>, unlock: Unlock): Promise<void> | undefined {
    const carried = turn.carried;
    turn.carried = undefined;
    if (carried !== undefined) this.#applyCarried(carried);
    return this.gate.leave(unlock);
  }

  /**
   * Merges into state, one level deep: inside an action it joins the
   * action's turn; while another turn is inside, it is checked now and
   * carried by that turn; otherwise it is a turn of its own.
   */
  setState(update: StateUpdate<S>): Promise<S> | S {
    const holder = this.gate.holder;
    // A turn applying carried updates runs no user code that could be waiting on this call.
    if (holder !== undefined && !holder.appliesCarried) {
      if (holder.kind === 'action' && holder.phase === 'running') return (holder.staged = this.merged(update));
      // From outside the turn: refused to its caller now if bad, rather than failing the turn it joins.
      const state = this.merged(update);
      assertJsonState(state, `Agent ${JSON.stringify(this.id)}: state`);
      holder.staged = state;
      (holder.carried ??= []).push(update);
      return state;
    }
    if (this.gate.abandoned > 0) {
      throw new AgentRouterError(409, 'turn_ended', `Agent ${JSON.stringify(this.id)}: setState from an action whose turn was already cut`);
    }
    const turn = new Turn<S>('setState', new TurnCancel(), true);
    return this.runTurn(turn, async () => (turn.staged = this.merged(update)));
  }

  /**
   * The state with `update` merged in. A function is given a copy, and what
   * it returns is merged onto that copy: one that changes its argument and
   * then throws leaves the state as it was.
   */
  merged(update: StateUpdate<S>): S {
    if (typeof update !== 'function') return { ...this.state, ...checkState(update, 'setState') } as S;
    // Checked first: an action may have staged what is not JSON, which the copy would silently turn into something else.
    assertJsonState(this.state, `Agent ${JSON.stringify(this.id)}: state`);
    const current = structuredClone(this.state);
    const changes = update(current);
    if (changes === undefined) {
      throw new TypeError(
        'Agent setState: the update function returned undefined; return the fields to change, e.g. setState((s) => ({ count: s.count + 1 })); the state it is given is a copy, so changing it changes nothing',
      );
    }
    return { ...current, ...checkState(changes, 'setState') } as S;
  }

  /**
   * Carried setState calls the last turn did not store (it failed, or they
   * came during its commit), as a turn right after it and ahead of the
   * waiting ones, which came later and must see them. Each is applied on its
   * own: one that throws now is left out, not the others. Their callers had
   * their answer already; a storage failure here meets the next turn too.
   */
  #applyCarried(updates: Array<StateUpdate<S>>): void {
    const turn = new Turn<S>('setState', new TurnCancel(), true, true);
    const apply = async (): Promise<void> => {
      for (const update of updates) {
        try {
          const next = this.merged(update);
          assertJsonState(next, `Agent ${JSON.stringify(this.id)}: state`);
          turn.staged = next;
        } catch {
          // left out, see above
        }
      }
    };
    this.runTurn(turn, apply, true).catch(() => {});
  }
}

export function checkState(value: unknown, where: string): JsonObject {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new TypeError(`Agent ${where}: state must be a plain object, e.g. { count: 0 }`);
  }
  // Spread, a promise adds nothing: an async update function would change nothing and report success.
  if (typeof (value as { then?: unknown }).then === 'function') {
    throw new TypeError(`Agent ${where}: got a promise (an async function?); compute the update first, then pass it: setState(await compute())`);
  }
  return value as JsonObject;
}
