/**
 * What a storage shared by processes (postgresStorage, redisStorage) also
 * carries between the routers that serve the same agents: the event logs of
 * streamed turns, so a client can rejoin a turn through any process (live
 * tail included), and cancel requests, so a turn can be cancelled or
 * interrupted through any process. Reached as `storage.turns`.
 *
 * Entries are opaque strings to the channel (the router encodes them); entry
 * `k` (from 1) of a turn is the one whose seq is `k` in the plain stream.
 */
export interface TurnChannel {
  /**
   * Adds entries `from`, `from + 1`, ... of `turnId`'s log, and with `ended`
   * marks the last of them its end (the log is then kept `ttlSeconds`, then
   * gone). `first` is the oldest entry the log still keeps: the channel may
   * forget the ones before it (the router's `replayLimit`). A router calls
   * it in order, one call at a time per turn, and never waits on it in the turn.
   */
  append(write: TurnLogWrite): Promise<void>;
  /** The log of `turnId` from entry `after + 1`, or undefined when no process logged it or it expired. */
  read(turnId: string, after: number): Promise<SharedTurnLog | undefined>;
  /**
   * Calls `wake` whenever `turnId`'s log may have grown or ended, until the
   * returned stop is called. A wake may be spurious; the reader reads again.
   */
  follow(turnId: string, wake: () => void): Promise<() => void>;
  /** Whether some process holds `agentId`'s storage lock now, i.e. runs a turn of it. */
  busy(agentId: string): Promise<boolean>;
  /**
   * Asks every process that listens (`onCancel`) to cancel `agentId`'s turns
   * that `request` names; resolves with the ids cancelled once the processes
   * that cancelled any have said so, or after `waitMs` with what was heard.
   */
  cancel(agentId: string, request: CancelRequest, waitMs: number): Promise<string[]>;
  /**
   * Hears the cancel requests of other processes (not this one's own); the
   * handler cancels what it holds and returns those turns' ids. The returned
   * function stops listening.
   */
  onCancel(handler: (agentId: string, request: CancelRequest) => string[]): Promise<() => void>;
}

/** Which turns to cancel: one by id, the running one (held under the storage lock), or all (running and queued). */
export type CancelRequest = { readonly turnId: string } | { readonly running: true } | { readonly all: true };

export interface TurnLogWrite {
  readonly agentId: string;
  readonly turnId: string;
  /** The index of `entries[0]`. */
  readonly from: number;
  readonly entries: readonly string[];
  /** The oldest entry still kept (1 while none was dropped). */
  readonly first: number;
  /** The last entry is the turn's end. */
  readonly ended: boolean;
  /** How long an ended log is kept. */
  readonly ttlSeconds: number;
}

export interface SharedTurnLog {
  readonly agentId: string;
  /** The oldest entry kept. */
  readonly first: number;
  /** Entries `max(after + 1, first)`, ... in order. */
  readonly from: number;
  readonly entries: readonly string[];
  /** The log has ended: its end is its last entry (in `entries`, or before `from`). */
  readonly ended: boolean;
}
