/**
 * The requests a router is running now, oldest first: what `abortAll()`
 * aborts, and what the turn timeout cuts, on one unref'd interval that
 * checks at a quarter of the timeout (at most every second), so a turn is
 * cut at most ~25% (or 1 s) late.
 *
 * A list linked through the requests' own records, not a Set and a Map:
 * keying a collection by a new object on every request makes V8 give that
 * object an identity hash and a table slot, each time, for every
 * collection. Measured in memory (scripts/bench/ab.ts), the Set and the Map
 * of deadlines were 5-10% of a JSON chat request's CPU; linking the record
 * is a few field writes. A timer per request would cost more (a timer
 * object and a closure held for the whole turn, a stream's included).
 */

/** What the list links: a request's record, with the fields the list keeps in it. */
export interface RunningTurn {
  /** Cut by the timeout (a local agent's turn); a remote target keeps its own. */
  readonly timed: boolean;
  /** When it began (ms since the epoch), for a timed one. */
  began: number;
  /** In the list now: deleting twice (expired, then settled) does nothing the second time. */
  listed: boolean;
  older: this | undefined;
  newer: this | undefined;
}

export class RunningTurns<T extends RunningTurn> {
  #oldest: T | undefined;
  #newest: T | undefined;
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
    turn.listed = true;
    turn.older = this.#newest;
    turn.newer = undefined;
    if (this.#newest === undefined) this.#oldest = turn;
    else this.#newest.newer = turn;
    this.#newest = turn;
    if (!turn.timed || this.#timeoutMs === Infinity) return;
    turn.began = Date.now();
    if (this.#timed++ === 0 && this.#timer === undefined) {
      this.#timer = setInterval(() => this.#sweep(), Math.max(1, Math.min(1000, this.#timeoutMs / 4)));
      this.#timer.unref();
    }
  }

  delete(turn: T): void {
    if (!turn.listed) return;
    turn.listed = false;
    const { older, newer } = turn;
    if (older === undefined) this.#oldest = newer;
    else older.newer = newer;
    if (newer === undefined) this.#newest = older;
    else newer.older = older;
    // Unlinked both ways: a held record must not keep its neighbours alive.
    turn.older = turn.newer = undefined;
    if (turn.timed && this.#timeoutMs !== Infinity) this.#timed--;
  }

  /** Every turn in the list now, oldest first (a copy: handling one may delete others). */
  list(): T[] {
    const turns: T[] = [];
    for (let turn = this.#oldest; turn !== undefined; turn = turn.newer) turns.push(turn);
    return turns;
  }

  #sweep(): void {
    const now = Date.now();
    let turn = this.#oldest;
    while (turn !== undefined) {
      const newer: T | undefined = turn.newer;
      if (turn.timed) {
        // Oldest first, one timeout for all: the first timed turn still in time ends the sweep.
        if (turn.began + this.#timeoutMs > now) break;
        this.delete(turn);
        this.#onExpire(turn);
      }
      // Cutting one turn can end others at once (an agent's next turn, run and answered): start over then.
      turn = newer !== undefined && !newer.listed ? this.#oldest : newer;
    }
    if (this.#timed === 0) {
      clearInterval(this.#timer);
      this.#timer = undefined;
    }
  }
}
