import { AgentRouterError } from '../errors.ts';
import type { JsonObject } from '../types.ts';

/** A follower reached events the log no longer keeps (replayLimit): how its stream ends. */
export function nextEventsExpired(): AgentRouterError {
  return new AgentRouterError(410, 'replay_expired', 'The next events of this turn are no longer kept (replayLimit)', { expose: true });
}

/** How long a stream waits for a shared storage to hold its turn's log, at its start and its end (a storage that hangs cannot hold the stream). */
export const COPY_WAIT_MS = 2000;

/** Calls `then` once a write to the shared storage settled, or after COPY_WAIT_MS if it has not. */
export function whenWritten(writing: Promise<void>, then: () => void): void {
  let called = false;
  const once = (): void => {
    if (called) return;
    called = true;
    clearTimeout(timer);
    then();
  };
  const timer = setTimeout(once, COPY_WAIT_MS);
  void writing.then(once);
}

/** What a streamed turn produced, in order: its text and tool events as they came, then exactly one end. */
export type LogEntry = string | ToolEntry | { readonly finished: JsonObject } | { readonly failed: JsonObject };

/** A typed stream's tool event (`tool.call`, `tool.result`): the plain stream counts it but sends nothing. */
export interface ToolEntry {
  readonly event: string;
  readonly data: string;
}

/** Hears a log grow (a rejoined stream waiting for the next event). */
export interface LogFollower {
  wake(): void;
}

/**
 * The events of one streamed turn, kept for rejoins: entry k (from 1) is the
 * event whose seq is k in the plain stream and k + 1 in the typed one (where
 * `turn.started` is 1). Past `limit` bytes the oldest go.
 */
export class TurnLog {
  readonly turnId: string;
  readonly agentId: string;
  /** Entries from `first`; dropped ones at the front are cleared, then cut off in bulk. */
  #entries: Array<LogEntry | undefined> = [];
  #head = 0;
  /** The index (from 1) of the oldest entry still kept. */
  first = 1;
  #bytes = 0;
  readonly #limit: number;
  /** When it ended (ms), once it did. */
  endedAt: number | undefined;
  followers: LogFollower[] | undefined;
  /** Where the log is copied for other processes (a storage's TurnChannel), if anywhere. */
  mirror: { add(entry: LogEntry, ended: boolean): void; settled(): Promise<void> | undefined } | undefined;
  /** Links of the store's list of ended logs, oldest first. */
  older: TurnLog | undefined;
  newer: TurnLog | undefined;
  /** Keeps the log for its ttl once it ended; none for a log read from another process. */
  readonly #store: TurnLogs | undefined;

  constructor(turnId: string, agentId: string, limit: number, store: TurnLogs | undefined) {
    this.turnId = turnId;
    this.agentId = agentId;
    this.#limit = limit;
    this.#store = store;
  }

  /** The index the next entry gets; `next - 1` entries were ever logged. */
  get next(): number {
    return this.first + this.#entries.length - this.#head;
  }

  get ended(): boolean {
    return this.endedAt !== undefined;
  }

  /** Entry `index`, or undefined when it was dropped or has not come yet. */
  at(index: number): LogEntry | undefined {
    if (index < this.first) return undefined;
    return this.#entries[this.#head + index - this.first];
  }

  text(text: string): void {
    this.#add(text, text);
  }

  tool(entry: ToolEntry): void {
    this.#add(entry, entry.data);
  }

  #add(entry: string | ToolEntry, data: string): void {
    if (this.ended) return;
    this.#entries.push(entry);
    this.mirror?.add(entry, false);
    this.#bytes += Buffer.byteLength(data);
    // The newest entry stays, however large: a rejoin can at least see where the turn is.
    while (this.#bytes > this.#limit && this.next - this.first > 1) this.#dropOldest();
    this.#wake();
  }

  end(entry: { finished: JsonObject } | { failed: JsonObject }): void {
    if (this.ended) return;
    this.#entries.push(entry);
    this.mirror?.add(entry, true);
    this.endedAt = 0;
    this.#store?.ended(this);
    this.#wake();
  }

  /**
   * Calls `then` once the copy for other processes holds every entry (at once with no copy), or after
   * COPY_WAIT_MS: a stream's end goes out then, so a client that saw it can rejoin through any process.
   */
  whenCopied(then: () => void): void {
    const copying = this.mirror?.settled();
    if (copying === undefined) return then();
    whenWritten(copying, then);
  }

  follow(follower: LogFollower): void {
    (this.followers ??= []).push(follower);
  }

  unfollow(follower: LogFollower): void {
    const followers = this.followers;
    if (followers === undefined) return;
    const at = followers.indexOf(follower);
    if (at !== -1) followers.splice(at, 1);
    if (followers.length === 0) this.followers = undefined;
  }

  /** The text of every entry, when none was dropped (a remote's stream ends without handing its reply over). */
  joined(): string | undefined {
    if (this.first !== 1) return undefined;
    let text = '';
    for (let i = this.#head; i < this.#entries.length; i++) {
      const entry = this.#entries[i];
      if (typeof entry === 'string') text += entry;
    }
    return text;
  }

  #dropOldest(): void {
    const entry = this.#entries[this.#head];
    if (typeof entry === 'string') this.#bytes -= Buffer.byteLength(entry);
    else if (entry !== undefined && 'data' in entry) this.#bytes -= Buffer.byteLength(entry.data);
    this.#entries[this.#head++] = undefined;
    this.first++;
    // Cut off the cleared front in bulk, so a long turn's dropping stays linear.
    if (this.#head > 64 && this.#head * 2 > this.#entries.length) {
      this.#entries = this.#entries.slice(this.#head);
      this.#head = 0;
    }
  }

  #wake(): void {
    const followers = this.followers;
    if (followers === undefined) return;
    for (const follower of followers.slice()) follower.wake();
  }
}

/**
 * The turn logs of one router: the live ones, and the ended ones for `ttl`
 * seconds (at most `maxEnded` of them), after which their memory is freed.
 */
export class TurnLogs {
  readonly #logs = new Map<string, TurnLog>();
  #oldest: TurnLog | undefined;
  #newest: TurnLog | undefined;
  #ended = 0;
  readonly #ttlMs: number;
  readonly #limit: number;
  readonly #maxEnded: number;
  readonly #now: () => number;
  #timer: NodeJS.Timeout | undefined;

  constructor(ttlSeconds: number, limitBytes: number, now: () => number = Date.now, maxEnded = 10_000) {
    this.#ttlMs = ttlSeconds * 1000;
    this.#limit = limitBytes;
    this.#now = now;
    this.#maxEnded = maxEnded;
  }

  /** Logs kept now, live and ended. */
  get size(): number {
    return this.#logs.size;
  }

  open(turnId: string, agentId: string): TurnLog {
    this.sweep();
    const log = new TurnLog(turnId, agentId, this.#limit, this);
    this.#logs.set(turnId, log);
    return log;
  }

  /** The log of `turnId` while it is kept; undefined after its ttl. */
  get(turnId: string): TurnLog | undefined {
    this.sweep();
    return this.#logs.get(turnId);
  }

  /** Frees the ended logs past their ttl, and the oldest beyond `maxEnded`. */
  sweep(): void {
    const now = this.#now();
    while (this.#oldest !== undefined && (this.#ended > this.#maxEnded || (this.#oldest.endedAt as number) + this.#ttlMs <= now)) {
      this.#remove(this.#oldest);
    }
    if (this.#oldest === undefined && this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
  }

  /** Starts `log`'s ttl; its own end() calls it. */
  ended(log: TurnLog): void {
    log.endedAt = this.#now();
    log.older = this.#newest;
    if (this.#newest !== undefined) this.#newest.newer = log;
    else this.#oldest = log;
    this.#newest = log;
    this.#ended++;
    this.sweep();
    this.#schedule();
  }

  #remove(log: TurnLog): void {
    this.#logs.delete(log.turnId);
    this.#oldest = log.newer;
    if (this.#oldest === undefined) this.#newest = undefined;
    else this.#oldest.older = undefined;
    log.newer = undefined;
    this.#ended--;
  }

  /** One unref'd timer, for the oldest ended log: memory goes back once turns expire, with no request to prompt it. */
  #schedule(): void {
    if (this.#timer !== undefined || this.#oldest === undefined) return;
    const wait = Math.max(1000, (this.#oldest.endedAt as number) + this.#ttlMs - this.#now());
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.sweep();
      this.#schedule();
    }, Math.min(wait, 2 ** 31 - 1));
    this.#timer.unref();
  }
}
