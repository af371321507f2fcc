import { AgentRouterError, errorBody } from '../errors.ts';
import type { Log } from '../lib/logger.ts';
import type { CancelRequest, TurnChannel } from '../storage/turn-channel.ts';
import type { JsonObject } from '../types.ts';
import { cancelledError, type AgentTurns, type TurnHolder } from './agent-turns.ts';
import { COPY_WAIT_MS, nextEventsExpired, TurnLog, type LogEntry } from './turn-log.ts';

/** How long a cancel or an interrupt waits for the other processes to answer. */
const CANCEL_WAIT_MS = 2000;
/** How long after failing to listen for cancel requests a turn tries again. */
const RELISTEN_MS = 30_000;

/**
 * What a router shares with the other processes of a storage that has a
 * TurnChannel (postgresStorage, redisStorage): it copies its streamed turns'
 * logs there, serves rejoins of turns other processes ran, and cancels its
 * own turns when another process is asked to.
 */
export class SharedTurns<T extends TurnHolder> {
  readonly #turns: AgentTurns<T>;
  readonly #logger: Log;
  readonly #ttlSeconds: number;
  readonly #listening = new Set<TurnChannel>();

  constructor(turns: AgentTurns<T>, logger: Log, ttlSeconds: number) {
    this.#turns = turns;
    this.#logger = logger;
    this.#ttlSeconds = ttlSeconds;
  }

  /** Hears the channel's cancel requests from now on (once per channel): this process cancels what it holds. */
  listen(channel: TurnChannel): void {
    if (this.#listening.has(channel)) return;
    this.#listening.add(channel);
    channel.onCancel((agentId, request) => this.#cancelHere(agentId, request)).catch((error: unknown) => {
      // Tried again by a turn after a pause, not by every turn: a lasting refusal (a Redis ACL without the channels) is one line a while.
      setTimeout(() => this.#listening.delete(channel), RELISTEN_MS).unref();
      this.#logger.error(`AgentRouter: could not listen for cancel requests from other processes; a turn tries again ${RELISTEN_MS / 1000} s from now`, error);
    });
  }

  /** Writes the turn's log, still empty, to the channel; a failure is logged (as a failed copy is), never thrown. */
  announce(channel: TurnChannel, agentId: string, turnId: string): Promise<void> {
    return channel.append({ agentId, turnId, from: 1, entries: [], first: 1, ended: false, ttlSeconds: this.#ttlSeconds }).catch((error: unknown) => {
      this.#logger.error(`AgentRouter: announcing turn ${turnId} to the shared storage failed; rejoins through other processes may not find it`, error, { agentId, turnId });
    });
  }

  /** A log's copy on the channel, written as the log grows: after `announced`, the log's first write, has settled. */
  mirror(channel: TurnChannel, log: TurnLog, announced: Promise<void>): LogMirror {
    return new LogMirror(channel, log, this.#ttlSeconds, this.#logger, announced);
  }

  /** Asks the other processes to cancel; the ids they cancelled. */
  cancelElsewhere(channel: TurnChannel, agentId: string, request: CancelRequest): Promise<string[]> {
    return channel.cancel(agentId, request, CANCEL_WAIT_MS);
  }

  #cancelHere(agentId: string, request: CancelRequest): string[] {
    const cancelled: string[] = [];
    for (const holder of this.#turns.of(agentId).slice()) {
      const cancel = holder.cancel;
      if (cancel === undefined || cancel.aborted || holder.turnId === undefined || !holder.cancellable) continue;
      const named = 'turnId' in request ? holder.turnId === request.turnId : 'all' in request ? true : holder.running;
      if (!named) continue;
      cancel.abort(cancelledError(holder.turnId));
      cancelled.push(holder.turnId);
      if (!('all' in request)) break;
    }
    return cancelled;
  }
}

/** Copies a log to a channel: what is added in one tick is one append, one append in flight, in order. */
export class LogMirror {
  readonly #channel: TurnChannel;
  readonly #log: TurnLog;
  readonly #ttlSeconds: number;
  readonly #logger: Log;
  #pending: string[] = [];
  #from = 1;
  #ended = false;
  #busy = false;
  /** Waiting for every entry to be written (see settled). */
  #waiting: Array<() => void> = [];

  constructor(channel: TurnChannel, log: TurnLog, ttlSeconds: number, logger: Log, announced: Promise<void>) {
    this.#channel = channel;
    this.#log = log;
    this.#ttlSeconds = ttlSeconds;
    this.#logger = logger;
    // In flight until then: an announce slower than the stream's wait for it must not land after (and over) these writes.
    this.#busy = true;
    void announced.then(() => this.#write());
  }

  add(entry: LogEntry, ended: boolean): void {
    this.#pending.push(JSON.stringify(entry));
    if (ended) this.#ended = true;
    if (!this.#busy) {
      this.#busy = true;
      setImmediate(() => this.#write());
    }
  }

  /** Resolves once every entry added so far was written (or failed to be); undefined when none waits. */
  settled(): Promise<void> | undefined {
    if (!this.#busy) return undefined;
    return new Promise<void>((resolve) => this.#waiting.push(resolve));
  }

  #write(): void {
    const entries = this.#pending;
    if (entries.length === 0) {
      this.#busy = false;
      const waiting = this.#waiting;
      this.#waiting = [];
      for (const resolve of waiting) resolve();
      return;
    }
    this.#pending = [];
    const log = this.#log;
    const from = this.#from;
    this.#from += entries.length;
    const ended = this.#ended && this.#pending.length === 0;
    const write = { agentId: log.agentId, turnId: log.turnId, from, entries, first: log.first, ended, ttlSeconds: this.#ttlSeconds };
    this.#channel.append(write).then(
      () => this.#write(),
      (error: unknown) => {
        this.#logger.error(`AgentRouter: copying turn ${log.turnId}'s events to the shared storage failed; rejoins through other processes may miss them`, error, { agentId: log.agentId, turnId: log.turnId });
        this.#write();
      },
    );
  }
}

/**
 * The log of a turn another process ran, read from the channel and then
 * followed there to its end; undefined when no process logged it (or it expired).
 * `stop` ends the following (the rejoined client left). A turn that logs
 * nothing for `turnTimeout` seconds ends here as timed out: its process would have cut it and logged that.
 */
export async function sharedLog(channel: TurnChannel, turnId: string, turnTimeout: number): Promise<{ log: TurnLog; stop: () => void } | undefined> {
  const first = await channel.read(turnId, 0);
  if (first === undefined) return undefined;
  const log = new TurnLog(turnId, first.agentId, Infinity, undefined);
  log.first = first.first;
  let quiet: NodeJS.Timeout | undefined;
  const take = (read: { from: number; entries: readonly string[] }): void => {
    if (read.from > log.next) {
      return log.end({ failed: errorBody(nextEventsExpired()) as JsonObject });
    }
    const entries = read.entries.slice(log.next - read.from);
    for (const text of entries) {
      const entry = JSON.parse(text) as LogEntry;
      if (typeof entry === 'string') log.text(entry);
      else if ('data' in entry) log.tool(entry);
      else log.end(entry);
    }
    if (entries.length > 0) quiet?.refresh();
  };
  take(first);
  if (log.ended) return { log, stop: () => {} };
  let reading = false;
  let again = false;
  let stopped = false;
  if (turnTimeout > 0) {
    // The turn's own process ends it within turnTimeout and copies that end within COPY_WAIT_MS.
    quiet = setTimeout(() => {
      log.end({ failed: errorBody(wentQuiet(turnId, turnTimeout)) as JsonObject });
      stop();
    }, turnTimeout * 1000 + COPY_WAIT_MS);
  }
  const wake = (): void => {
    if (reading) return void (again = true);
    if (stopped || log.ended) return;
    reading = true;
    channel.read(turnId, log.next - 1).then(
      (read) => {
        reading = false;
        if (read === undefined) log.end({ failed: errorBody(new AgentRouterError(404, 'turn_not_found', `Turn ${JSON.stringify(turnId)} is no longer kept`, { expose: true })) as JsonObject });
        else take(read);
        if (log.ended) stop();
        else if (again) {
          again = false;
          wake();
        }
      },
      () => {
        reading = false;
        again = true;
      },
    );
  };
  let stopFollowing: (() => void) | undefined;
  const stop = (): void => {
    stopped = true;
    clearTimeout(quiet);
    stopFollowing?.();
  };
  try {
    stopFollowing = await channel.follow(turnId, wake);
  } catch (error) {
    clearTimeout(quiet);
    throw error;
  }
  if (stopped) stopFollowing();
  // Entries written between the first read and the subscription.
  wake();
  return { log, stop };
}

/** A turn of another process that logged nothing for turnTimeout: that process stopped, or lost the storage. */
function wentQuiet(turnId: string, turnTimeout: number): AgentRouterError {
  const why = `Turn ${JSON.stringify(turnId)} has logged nothing for ${turnTimeout} s (turnTimeout): the process running it stopped, or lost its storage`;
  return new AgentRouterError(504, 'turn_timeout', why, { expose: true });
}
