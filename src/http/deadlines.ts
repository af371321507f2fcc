/**
 * Turn deadlines for all of a router's requests on one timer. A timer per
 * request costs a timer object and a closure for the whole turn (measured:
 * part of the ~10 KB a held stream keeps); here a request is one Map entry,
 * and one unref'd interval checks them at a quarter of the timeout (at most
 * every second), so a turn is cut at most ~25% (or 1 s) late.
 */
/** What a deadline cuts: the router's TurnCancel. */
type Abortable = { abort(reason: unknown): void };

export class Deadlines {
  readonly #entries = new Map<Abortable, number>();
  readonly #timeoutMs: number;
  readonly #onExpire: (controller: Abortable) => void;
  #timer: NodeJS.Timeout | undefined;

  constructor(timeoutSeconds: number, onExpire: (controller: Abortable) => void) {
    this.#timeoutMs = timeoutSeconds * 1000;
    this.#onExpire = onExpire;
  }

  add(controller: Abortable): void {
    this.#entries.set(controller, Date.now() + this.#timeoutMs);
    if (this.#timer === undefined) {
      this.#timer = setInterval(() => this.#sweep(), Math.max(1, Math.min(1000, this.#timeoutMs / 4)));
      this.#timer.unref();
    }
  }

  delete(controller: Abortable): void {
    this.#entries.delete(controller);
  }

  #sweep(): void {
    const now = Date.now();
    // Insertion order is deadline order (one timeout for all), so stop at the first live one.
    for (const [controller, deadline] of this.#entries) {
      if (deadline > now) return;
      this.#entries.delete(controller);
      this.#onExpire(controller);
    }
    if (this.#entries.size === 0) {
      clearInterval(this.#timer);
      this.#timer = undefined;
    }
  }
}
