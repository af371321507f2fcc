import type { ChatMessage, JsonObject } from '../types.ts';
import type { TurnChannel } from './turn-channel.ts';

/** What storage holds for one agent id. */
export interface AgentRecord {
  state: JsonObject;
  messages: ChatMessage[];
  /**
   * Set by the first commit, then one more with each commit. A record made
   * again after `delete` should not reuse the deleted one's versions, or a
   * live instance still holding it cannot tell them apart: the built-in
   * storages start each record at a random version (`record-version.ts`).
   * Starting at 1 works otherwise.
   */
  version: number;
}

/** One completed turn: the new state, and the messages it adds to history. */
export interface TurnCommit {
  /** The version this turn started from (0 for an agent never stored). */
  expectedVersion: number;
  state: JsonObject;
  /** Appended to history; never the whole history, so a write's cost does not grow with it. */
  append: readonly ChatMessage[];
}

/** Releases a per-agent lock taken with `Storage.lock`. */
export type Unlock = () => Promise<void>;

/** A Storage shared by processes (Postgres, Redis): the optional cross-process members always present. */
export interface SharedStorage extends Storage {
  head(agentId: string): Promise<number>;
  lock(agentId: string, signal?: AbortSignal): Promise<Unlock>;
  loadSince(agentId: string, known: { version: number; messages: number }): Promise<AgentRecord | undefined>;
  delete(agentId: string): Promise<void>;
  close(): Promise<void>;
}

/**
 * The synchronous side of a storage that lives in this process
 * (MemoryStorage): same records and semantics as its async methods. A turn
 * on a free agent then takes no promise for its storage at all; each await
 * is a fraction of a microsecond, and a turn took about ten of them.
 */
export interface SyncStorage {
  /** Takes the lock if it is free and returns its release; undefined if it is held (then `Storage.lock` waits). */
  tryLock(agentId: string): (() => void) | undefined;
  head(agentId: string): number;
  /** Same as `Storage.commit`, throwing VersionConflictError at once. */
  commit(agentId: string, turn: TurnCommit): number;
}

/**
 * Where agents keep state and history. Implementations: MemoryStorage,
 * FileStorage, postgresStorage(pool), redisStorage(client).
 *
 * `commit` is compare-and-set on `version`: it throws VersionConflictError
 * when the stored version is not `expectedVersion`, which fences out a writer
 * that lost its lock. Backends shared by several processes also implement
 * `lock` (serialize turns on one id across processes) and `head` (cheap check
 * whether another process wrote a newer version).
 */
export interface Storage {
  /** The whole record, or `undefined` for an agent never stored. */
  load(agentId: string): Promise<AgentRecord | undefined>;
  /**
   * The record with only the history after what the caller already has:
   * `known` is a version the caller loaded or committed and the number of
   * messages it then held (history is append-only, so those are a prefix).
   * Lets an instance catch up with another process's turns without reading
   * the whole history again. Optional: without it the agent calls `load`.
   */
  loadSince?(agentId: string, known: { version: number; messages: number }): Promise<AgentRecord | undefined>;
  /** Writes one turn atomically and returns the new version. */
  commit(agentId: string, turn: TurnCommit): Promise<number>;
  /** The stored version (0 if none), without reading history. */
  head?(agentId: string): Promise<number>;
  /** Takes the cross-process lock for one agent id; resolves with its release. */
  lock?(agentId: string, signal?: AbortSignal): Promise<Unlock>;
  /** Synchronous twins of `lock`, `head` and `commit`, for a storage that lives in this process. */
  readonly sync?: SyncStorage | undefined;
  /** Forgets an agent. */
  delete?(agentId: string): Promise<void>;
  /** Carries turn events and cancel requests between the processes sharing this storage. */
  readonly turns?: TurnChannel | undefined;
  /** Releases what the storage holds open (file handles, timers); not the user's client. */
  close?(): Promise<void>;
}
