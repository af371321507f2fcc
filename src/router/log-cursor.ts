import type { SSEWriter } from '../http/sse-writer.ts';
import type { TurnCancel } from '../lib/cancel.ts';
import type { JsonObject } from '../types.ts';
import type { Exchange } from './exchange.ts';
import type { LogEntry, LogFollower, ToolEntry, TurnLog } from './turn-log.ts';

/** The entry a turn's log ends with. */
export type LogEnd = Extract<LogEntry, { finished: JsonObject } | { failed: JsonObject }>;

/**
 * A rejoined stream: a cursor into a turn's log that sends each entry after
 * the ones the client has, once and in order, as the log grows and the
 * client reads, until the log's end or the client leaves. Subclasses say how an entry is written.
 */
export abstract class LogCursor implements LogFollower {
  protected readonly log: TurnLog;
  protected readonly writer: SSEWriter;
  readonly #exchange: Exchange;
  readonly #cancel: TurnCancel;
  /** The last entry sent, or passed over as the client's. */
  #sent: number;
  /** The last entry the client had when it rejoined: a copy lagging behind the process that sent it may not hold it yet. */
  readonly #had: number;
  #waiting = false;
  #over = false;
  readonly #onCut = (): void => this.finish();

  constructor(exchange: Exchange, log: TurnLog, writer: SSEWriter, cancel: TurnCancel, had: number) {
    this.#exchange = exchange;
    this.log = log;
    this.writer = writer;
    this.#cancel = cancel;
    this.#had = had;
    this.#sent = Math.min(had, log.next - 1);
  }

  /** Sends a text or tool entry; a promise to wait for when the client reads slowly. */
  protected abstract send(entry: string | ToolEntry, index: number): Promise<void> | undefined;
  /** Writes the log's end as the stream's last frames. */
  protected abstract end(entry: LogEnd, index: number): void;
  /** Writes the error for entries the client needs next that were dropped (replayLimit). */
  protected abstract expired(): void;
  /** An entry the client had that reached this log after the rejoin began: sent to no one, but a stream may need to read it. */
  protected had(_entry: string | ToolEntry, _index: number): void {}

  /** Sends what the log holds, then follows it. */
  follow(): void {
    if (this.#cancel.aborted) return this.finish();
    this.#cancel.onAbort(this.#onCut);
    this.log.follow(this);
    this.wake();
  }

  wake(): void {
    if (this.#waiting || this.#over) return;
    const log = this.log;
    while (this.#sent + 1 < log.next) {
      const index = this.#sent + 1;
      const entry = log.at(index);
      const had = index <= this.#had;
      if (entry === undefined && !had) {
        this.expired();
        return this.finish();
      }
      this.#sent = index;
      if (entry === undefined) continue;
      if (typeof entry !== 'string' && !('data' in entry)) {
        if (!had) this.end(entry, index);
        return this.finish();
      }
      if (had) {
        this.had(entry, index);
        continue;
      }
      const waiting = this.send(entry, index);
      if (waiting !== undefined) {
        this.#waiting = true;
        waiting.then(
          () => {
            this.#waiting = false;
            this.wake();
          },
          () => this.finish(),
        );
        return;
      }
    }
    // Rejoined after the end was already seen: nothing more will come.
    if (log.ended && this.#sent >= log.next - 1) this.finish();
  }

  finish(): void {
    if (this.#over) return;
    this.#over = true;
    this.log.unfollow(this);
    this.#cancel.offAbort(this.#onCut);
    this.writer.end();
    this.#exchange.done();
  }
}
