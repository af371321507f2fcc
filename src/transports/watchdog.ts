const MAX_DELAY = 2 ** 31 - 1;

/**
 * Calls `onIdle` once nothing has made progress for `ms` milliseconds.
 *
 * Progress is a time stamp, not a timer reset: a busy stream pays one clock
 * read per chunk, and the one timer re-arms itself for the remaining time
 * when it fires early. `performance.now()` is monotonic, so a wall-clock jump
 * cannot fake silence. While paused (the consumer holds a chunk) it never
 * fires: a slow reader is not a silent remote.
 */
export class Watchdog {
  readonly #ms: number;
  readonly #onIdle: () => void;
  #last = performance.now();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #paused = false;
  #stopped = false;

  /** `ms` of Infinity never fires. */
  constructor(ms: number, onIdle: () => void) {
    this.#ms = ms;
    this.#onIdle = onIdle;
    if (Number.isFinite(ms)) this.#arm(ms);
  }

  touch(): void {
    this.#last = performance.now();
  }

  pause(): void {
    this.#paused = true;
  }

  resume(): void {
    this.#paused = false;
    this.#last = performance.now();
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
  }

  #arm(delay: number): void {
    // setTimeout turns a delay past 2^31-1 ms into 1 ms; the check re-arms for the rest instead.
    this.#timer = setTimeout(this.#check, Math.min(delay, MAX_DELAY));
    // A pending remote call keeps the process alive through its socket; the timer must not.
    this.#timer.unref();
  }

  readonly #check = (): void => {
    if (this.#stopped) return;
    const idle = performance.now() - this.#last;
    if (this.#paused) return this.#arm(this.#ms);
    if (idle < this.#ms) return this.#arm(this.#ms - idle);
    this.#stopped = true;
    this.#onIdle();
  };
}
