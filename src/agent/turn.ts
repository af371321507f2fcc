import { randomUUID } from 'node:crypto';
import type { JsonObject, TokenUsage, ToolCall } from '../types.ts';
import { TurnCancel } from '../lib/cancel.ts';
import type { ToolOutcome } from './tools.ts';

/** What a turn does: answer a message, run an action, or apply setState calls. */
export type TurnKind = 'chat' | 'action' | 'setState';

/**
 * Where a turn is. `queued` waits for the agent's earlier turns; `loading`
 * holds the agent and catches up with storage; `running` runs the model or
 * the action; `committing` writes the result; the last three are final.
 */
export type TurnPhase = 'queued' | 'loading' | 'running' | 'committing' | 'done' | 'failed' | 'cancelled';

/** The only moves a turn may make; anything else is a bug in the agent, thrown as one. */
const NEXT: { readonly [P in TurnPhase]: readonly TurnPhase[] } = {
  queued: ['loading', 'failed', 'cancelled'],
  loading: ['running', 'failed', 'cancelled'],
  running: ['committing', 'failed', 'cancelled'],
  committing: ['done', 'failed'],
  done: [],
  failed: [],
  cancelled: [],
};

/**
 * What a turn produced, in order: the reply's text as it came, usage, the provider's cut-short mark,
 * and each tool call the model made with its outcome (`cause` there is for the log only).
 */
export type TurnEvent =
  | { type: 'text'; text: string }
  | { type: 'usage'; usage: TokenUsage }
  | { type: 'truncated' }
  | { type: 'tool.call'; call: ToolCall }
  | { type: 'tool.result'; call: ToolCall; outcome: ToolOutcome }
  /** The call waits for a person's decision: the turn pauses after this step. */
  | { type: 'tool.approval_required'; call: ToolCall };

/**
 * One turn of one agent, from its request to its end. The agent makes it,
 * moves it through its phases (only as {@link NEXT} allows) and appends what
 * it produced; nothing a turn changes is stored until `committing` succeeds.
 */
export class Turn<S extends JsonObject = JsonObject> {
  /** Random and URL-safe: unique across processes. */
  readonly id: string;
  readonly kind: TurnKind;
  readonly cancel: TurnCancel;
  /**
   * The cancel was made for this turn, not handed in by the router: the agent aborts it at the turn's end
   * if the turn did not complete, so a model still holding its signal stops.
   */
  readonly ownsCancel: boolean;
  #phase: TurnPhase = 'queued';
  readonly events: TurnEvent[] = [];
  /** The state as this turn changed it so far; undefined while it changed nothing. */
  staged: S | undefined;
  /**
   * setState calls from outside the turn's own code (see Agent.setState): staged into it, and applied by a
   * turn of their own after it if this one stores nothing.
   */
  carried: Array<StateUpdate<S>> | undefined;
  /** How many of `carried` the commit under way holds. */
  carriedInCommit = 0;
  /** The version of the record the turn started from: its commit expects storage to hold it still. */
  baseVersion = 0;
  /** A setState turn applying another turn's carried updates: a setState during it is a turn of its own. */
  readonly appliesCarried: boolean;

  /** `id`: one the router made (it sends it before the turn starts); a random one otherwise. */
  constructor(kind: TurnKind, cancel: TurnCancel, ownsCancel: boolean, appliesCarried = false, id: string = randomUUID()) {
    this.id = id;
    this.kind = kind;
    this.cancel = cancel;
    this.ownsCancel = ownsCancel;
    this.appliesCarried = appliesCarried;
  }

  get phase(): TurnPhase {
    return this.#phase;
  }

  get signal(): AbortSignal {
    return this.cancel.signal;
  }

  /** Ended, one way or another. */
  get over(): boolean {
    return NEXT[this.#phase].length === 0;
  }

  /** Moves to `phase`; a move the table does not allow throws. */
  to(phase: TurnPhase): void {
    if (!NEXT[this.#phase].includes(phase)) throw new Error(`Turn ${this.id}: cannot move from ${this.#phase} to ${phase}`);
    this.#phase = phase;
    this.cancel.watcher?.turnPhase(this, phase);
  }

  /** Ends the turn as failed, or cancelled when its cancel was aborted; a turn already over stays as it ended. */
  fail(): void {
    if (this.over) return;
    this.to(this.cancel.aborted && this.#phase !== 'committing' ? 'cancelled' : 'failed');
  }

  /** Appends what the turn produced; only while it runs. */
  emit(event: TurnEvent): void {
    if (this.#phase !== 'running') throw new Error(`Turn ${this.id}: an event while ${this.#phase}`);
    this.events.push(event);
  }

  /** The reply's text so far (from the event at `from` on): its text events joined. */
  text(from = 0): string {
    // Joined, not `+=`: history keeps the reply, and a string built chunk by chunk is a tree of them.
    const parts: string[] = [];
    for (let i = from; i < this.events.length; i++) {
      const event = this.events[i] as TurnEvent;
      if (event.type === 'text') parts.push(event.text);
    }
    return parts.join('');
  }
}

export type StateUpdate<S> = Partial<S> | ((state: S) => Partial<S>);
