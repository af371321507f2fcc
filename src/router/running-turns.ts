import { LinkedList } from '../lib/linked-list.ts';

/**
 * The requests a router is running now, oldest first: what `abortAll()`
 * aborts, and what the turn timeout cuts, on one unref'd interval that
 * checks at a quarter of the timeout (at most every second), so a turn is
 * cut at most ~25% (or 1 s) late. A timer per request would hold a closure
 * for the whole turn, a stream's included.
 */
/** What the list links: a request's record, with the fields the list keeps in it. */
export interface RunningTurn {
  /** Cut by the timeout (a local agent's turn); a remote target keeps its own. */
  timed: boolean;
  /** When it began (ms since the epoch), for a timed one. */
  began: number;
  older: this | undefined;
  newer: this | undefined;
}

export class RunningTurns<T extends RunningTurn> {
  readonly #list = new LinkedList<T>();
  /** Timed turns in the list: the interval runs while there are any. */
  #timed = 0;
  #timer: NodeJS.Timeout | undefined;
  readonly #timeoutMs: number;
  readonly #onExpire: (turn: T) => void;

  /** `timeoutSeconds` 0 or Infinity: nothing expires. `onExpire` gets a timed-out turn, already out of the list. */
  constructor(timeoutSeconds: number, onExpire: (turn: T) => void) {
    this.#timeoutMs = timeoutSeconds > 0 && timeoutSeconds !== Infinity ? timeoutSeconds * 1000 : Infinity;
    this.#onExpire = onExpire;
  }

  /** False when nothing would ever cut a timed turn (no timeout). */
  get timing(): boolean {
    return this.#timeoutMs !== Infinity;
  }

  add(turn: T): void {
    this.#list.push(turn);
    if (!turn.timed || this.#timeoutMs === Infinity) return;
    turn.began = Date.now();
    if (this.#timed++ === 0 && this.#timer === undefined) {
      this.#timer = setInterval(() => this.#sweep(), Math.max(1, Math.min(1000, this.#timeoutMs / 4)));
      this.#timer.unref();
    }
  }

  /** Takes `turn` out; deleting twice (expired, then settled) does nothing the second time. */
  delete(turn: T): void {
    if (this.#list.remove(turn) && turn.timed && this.#timeoutMs !== Infinity) this.#timed--;
  }

  /** Every turn in the list now, oldest first (a copy: handling one may delete others). */
  list(): T[] {
    const turns: T[] = [];
    for (let turn = this.#list.oldest; turn !== undefined; turn = turn.newer) turns.push(turn);
    return turns;
  }

  #sweep(): void {
    const now = Date.now();
    let turn = this.#list.oldest;
    while (turn !== undefined) {
      const newer: T | undefined = turn.newer;
      if (turn.timed) {
        // Oldest first, one timeout for all: the first timed turn still in time ends the sweep.
        if (turn.began + this.#timeoutMs > now) break;
        this.delete(turn);
        this.#onExpire(turn);
      }
      // Cutting one turn can end others at once (an agent's next turn, run and answered): start over then.
      turn = newer !== undefined && !this.#list.has(newer) ? this.#list.oldest : newer;
    }
    if (this.#timed === 0) {
      clearInterval(this.#timer);
      this.#timer = undefined;
    }
  }
}
