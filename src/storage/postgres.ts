import { createHash } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import { LockLostError, VersionConflictError } from '../errors.ts';
import { checkKnownOptions } from '../options.ts';
import type { ChatMessage, JsonObject } from '../types.ts';
import { checkRecord, checkTurn } from './check.ts';
import { assertStorableId, idDigest, leaseMilliseconds } from './ids.ts';
import { rethrowOutage } from './outage.ts';
import { firstVersion, sameRecord } from './record-version.ts';
import { postgresStorageDDL, statements, tableNames } from './postgres-sql.ts';
import {
  connectUnlessAborted,
  endSession,
  reportedByServer,
  sessionEnded,
  startPings,
  unlock,
  waitForLock,
  type HeldLock,
  type PgPoolLike,
  type PgQueryResultLike,
} from './postgres-session.ts';
import type { TableNames } from './postgres-sql.ts';
import type { AgentRecord, SharedStorage, TurnCommit, Unlock } from './storage.ts';
import { PostgresTurnChannel } from './postgres-turns.ts';
import { backoff, delay } from './wait.ts';

export { postgresStorageDDL } from './postgres-sql.ts';
export type { PgPoolClientLike, PgPoolLike, PgQueryable, PgQueryResultLike } from './postgres-session.ts';

export interface PostgresStorageOptions {
  /** Schema for the tables (created if missing). @defaultValue the connection's search_path */
  schema?: string | undefined;
  /** Prefix of the two table names, `<prefix>agents` and `<prefix>messages`. @defaultValue "agent_router_" */
  tablePrefix?: string | undefined;
  /**
   * A held lock's lease. The lock lives on its own connection, so a process
   * that dies releases it at once (its connection closes). The lease covers
   * a process that hangs while holding it: on Postgres 14+ the session is
   * given `idle_session_timeout` = the lease and pinged every third of it,
   * so a holder that stops answering loses its session, and the lock, after
   * the lease. Older servers keep the lock until the connection drops.
   * @defaultValue 30
   */
  leaseSeconds?: number | undefined;
  /** Run the DDL (`CREATE ... IF NOT EXISTS`) on first use. @defaultValue true */
  createTables?: boolean | undefined;
  /**
   * Share turn control with the other processes on this database: rejoin a
   * stream, cancel a turn, `whenBusy` through any of them. It keeps one
   * connection of the pool for LISTEN once the process serves a turn, until
   * `storage.close()` (call it before `pool.end()`). Off, turn control stays in each process.
   * @defaultValue false
   */
  shareTurns?: boolean | undefined;
  /** Ping held lock sessions (default true). `false` acts like a holder that hung: for tests. @internal */
  renewLease?: boolean | undefined;
}

/** A Storage on Postgres, with the cross-process members always present. */
export type PostgresStorage = SharedStorage;

/** How long a commit whose answer was lost waits to learn whether it was stored. */
const LANDED_CHECK_MS = 5000;

// Serializes the DDL of concurrent first uses: CREATE TABLE IF NOT EXISTS
// racing itself can fail on the catalog's unique index.
const DDL_LOCK_KEY = '7225371954390861409';

/**
 * Storage on a Postgres pool you own (`new pg.Pool(...)`, or anything with
 * the same `query`/`connect`). State and version live in one row per agent,
 * history as one row per message, so a turn costs one single-statement
 * write whatever the history's length. `commit` is compare-and-set on the
 * version in that statement; `lock` is a session advisory lock on a client
 * taken from the pool for the turn (size the pool above the number of agent
 * ids with turns in flight at once: each holds one connection). A `pg.Client`
 * is one connection, and is refused with a TypeError: pass a `pg.Pool`.
 *
 * @example
 * import pg from 'pg';
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * pool.on('error', (error) => console.error('postgres:', error.message)); // unheard, a lost idle connection ends the process
 * const storage = postgresStorage(pool);
 */
const POSTGRES_OPTIONS: { readonly [K in keyof Required<PostgresStorageOptions>]: true } = { schema: true, tablePrefix: true, leaseSeconds: true, createTables: true, shareTurns: true, renewLease: true };

export function postgresStorage(pool: PgPoolLike, options: PostgresStorageOptions = {}): PostgresStorage {
  if (typeof pool?.query !== 'function' || typeof pool.connect !== 'function') {
    throw new TypeError('postgresStorage: pass a pg.Pool (an object with query() and connect()), e.g. postgresStorage(new pg.Pool())');
  }
  // A pg.Client is one session, and each lock needs a connection of its own (its connect() fails at the first turn).
  // Told apart by shape: pools count their clients, and a client has none.
  if (typeof (pool as { totalCount?: unknown }).totalCount !== 'number' && 'connectionParameters' in pool) {
    throw new TypeError(
      'postgresStorage: pass a pg.Pool, not a pg.Client: each agent id with a turn in flight holds its lock on a connection of its own, ' +
        'which one client cannot give; e.g. postgresStorage(new pg.Pool({ connectionString: process.env.DATABASE_URL }))',
    );
  }
  checkKnownOptions(options, POSTGRES_OPTIONS, 'postgresStorage');
  return new PostgresStorageImpl(pool, options);
}

class PostgresStorageImpl implements PostgresStorage {
  readonly #pool: PgPoolLike;
  readonly #tables: TableNames;
  readonly #sql: ReturnType<typeof statements>;
  readonly #ddl: string | undefined;
  readonly #leaseMs: number;
  readonly #renew: boolean;
  readonly #held = new Map<string, HeldLock>();
  readonly #timers = new Set<NodeJS.Timeout>();
  #ready: Promise<boolean> | undefined;
  /** What every public method's failure goes through: a lost or refused connection becomes 503 storage_unavailable. */
  readonly #outage = rethrowOutage('postgresStorage');
  /** Turn events and cancel requests between the processes sharing this database. */
  readonly turns: PostgresTurnChannel | undefined;

  constructor(pool: PgPoolLike, options: PostgresStorageOptions) {
    this.#pool = pool;
    this.#tables = tableNames(options);
    this.#sql = statements(this.#tables);
    this.#ddl = options.createTables === false ? undefined : postgresStorageDDL(options);
    this.#leaseMs = leaseMilliseconds(options.leaseSeconds, 30, 'postgresStorage');
    this.#renew = options.renewLease ?? true;
    if (options.shareTurns === true) this.turns = new PostgresTurnChannel(pool, this.#tables, () => this.#init(), (agentId) => this.#lockKey(agentId));
  }

  head(agentId: string): Promise<number> {
    return this.#head(agentId).catch(this.#outage);
  }

  load(agentId: string): Promise<AgentRecord | undefined> {
    return this.#read(agentId, this.#sql.load, []).catch(this.#outage);
  }

  loadSince(agentId: string, known: { version: number; messages: number }): Promise<AgentRecord | undefined> {
    return this.#read(agentId, this.#sql.loadSince, [known.version]).catch(this.#outage);
  }

  commit(agentId: string, turn: TurnCommit): Promise<number> {
    return this.#commit(agentId, turn).catch(this.#outage);
  }

  delete(agentId: string): Promise<void> {
    return this.#delete(agentId).catch(this.#outage);
  }

  lock(agentId: string, signal?: AbortSignal): Promise<Unlock> {
    return this.#lock(agentId, signal).catch(this.#outage);
  }

  async #head(agentId: string): Promise<number> {
    const key = this.#key(agentId);
    await this.#init();
    const { rows } = await this.#query(agentId, this.#sql.head, [key]);
    return rows[0] === undefined ? 0 : Number(rows[0]['version']);
  }

  async #read(agentId: string, sql: string, args: unknown[]): Promise<AgentRecord | undefined> {
    const key = this.#key(agentId);
    await this.#init();
    const row = (await this.#query(agentId, sql, [key, ...args])).rows[0];
    if (row === undefined) return undefined;
    const record = {
      state: JSON.parse(String(row['state'])) as JsonObject,
      messages: JSON.parse(String(row['messages'])) as ChatMessage[],
      version: Number(row['version']),
    };
    return checkRecord(record, agentId, 'postgresStorage');
  }

  async #commit(agentId: string, turn: TurnCommit): Promise<number> {
    const key = this.#key(agentId);
    checkTurn(turn, 'postgresStorage');
    await this.#init();
    // Never through the pool instead: once the lock's session is gone another process may hold the lock,
    // and this commit could land before that process's, which would then be the one refused.
    const broken = this.#held.get(agentId)?.broken;
    if (broken !== undefined) throw new LockLostError(agentId, 'postgresStorage', `its session ended: ${broken.message}`);
    const state = JSON.stringify(turn.state);
    const append = JSON.stringify(turn.append);
    const version = turn.expectedVersion === 0 ? firstVersion() : turn.expectedVersion + 1;
    // The lock's session, which the commit runs on: its backend is ended before a lost answer is checked.
    const held = this.#held.get(agentId);
    let rows: Array<Record<string, unknown>>;
    const statement = turn.expectedVersion === 0
      ? this.#query(agentId, this.#sql.commitFirst, [key, agentId, state, append, version])
      : this.#query(agentId, this.#sql.commitNext, [key, turn.expectedVersion, state, append]);
    if (held !== undefined) held.committing = true;
    try {
      ({ rows } = await statement);
    } catch (error) {
      // The connection broke, or the server ended the session, after the statement went out: it may have applied, and a
      // failed turn must change nothing, so the record is read again on another connection.
      if (reportedByServer(error) && !sessionEnded(error)) throw error;
      // Its connection is broken: its pool slot goes back now, or a pool this lock filled could not run the check.
      if (held !== undefined && !held.released) {
        held.released = true;
        held.broken ??= error instanceof Error ? error : new Error(String(error));
        held.client.release(error instanceof Error ? error : true);
      }
      if (await this.#landed(key, version, state, append, held?.session)) return version;
      // Not stored, and the lock went with its session, as when that ends mid-turn.
      if (held !== undefined && sessionEnded(error)) throw new LockLostError(agentId, 'postgresStorage', `its session ended: ${(error as Error).message}`);
      throw error;
    } finally {
      if (held !== undefined) held.committing = false;
    }
    if (rows[0] !== undefined) return Number(rows[0]['version']);
    const actual = await this.#head(agentId).catch(() => undefined);
    throw new VersionConflictError(agentId, turn.expectedVersion, actual);
  }

  async #delete(agentId: string): Promise<void> {
    const key = this.#key(agentId);
    await this.#init();
    // The lock's own session while this storage holds the id (a turn deleting its agent), else a pooled one.
    const held = this.#held.get(agentId);
    const own = held !== undefined && held.broken === undefined ? held.client : undefined;
    const client = own ?? (await this.#pool.connect());
    let failure: unknown;
    try {
      await client.query('BEGIN', []);
      await client.query(this.#sql.deleteAgent, [key]);
      await client.query(this.#sql.deleteMessages, [key]);
      await client.query('COMMIT', []);
    } catch (error) {
      failure = error;
      await client.query('ROLLBACK', []).catch(() => undefined);
      throw error;
    } finally {
      if (own === undefined) client.release(failure instanceof Error ? failure : undefined);
    }
  }

  async #lock(agentId: string, signal?: AbortSignal): Promise<Unlock> {
    const lockKey = this.#lockKey(agentId);
    signal?.throwIfAborted();
    const withLease = await this.#init();
    const client = await connectUnlessAborted(this.#pool, signal);
    const held: HeldLock = { client, session: undefined, broken: undefined, released: false, committing: false };
    // A checked-out pg client that errors with no listener crashes the process:
    // that is what a lease expiry (the server ends the session) looks like.
    const onError = (error: Error): void => {
      held.broken = error;
    };
    client.on?.('error', onError);
    // Mid-wait or holding the lock: closing the connection is the one sure release. On an abort it is
    // closed at once, so a query to a server that stopped answering fails now instead of never.
    let dropped = false;
    const drop = (error: unknown): void => {
      if (dropped) return;
      dropped = true;
      client.removeListener?.('error', onError);
      client.release(error instanceof Error ? error : true);
    };
    const onAbort = (): void => drop(signal?.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    let prior: string | undefined;
    try {
      const first = withLease
        ? await client.query(this.#sql.tryLockWithLease, [lockKey, `${this.#leaseMs}ms`])
        : await client.query(this.#sql.tryLock, [lockKey]);
      const row = first.rows[0] ?? {};
      prior = row['prior'] === undefined || row['prior'] === null ? undefined : String(row['prior']);
      held.session = { pid: Number(row['pid']), since: String(row['since']) };
      if (row['ok'] !== true) await waitForLock(this.#pool, this.#sql, client, lockKey, Number(row['pid']), signal);
      signal?.throwIfAborted();
    } catch (error) {
      drop(error);
      throw signal?.aborted === true ? signal.reason : error;
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
    this.#held.set(agentId, held);
    const timer = this.#renew && withLease ? startPings(held, this.#sql, this.#leaseMs) : undefined;
    if (timer !== undefined) this.#timers.add(timer);
    let unlocked = false;
    return async () => {
      if (unlocked) return;
      unlocked = true;
      if (timer !== undefined) {
        clearInterval(timer);
        this.#timers.delete(timer);
      }
      if (this.#held.get(agentId) === held) this.#held.delete(agentId);
      await unlock(held, this.#sql, lockKey, withLease ? (prior ?? '0') : undefined);
      client.removeListener?.('error', onError);
    };
  }

  /** Stops lease pings and releases held locks. The pool stays open: it is yours to end. */
  async close(): Promise<void> {
    for (const timer of this.#timers) clearInterval(timer);
    this.#timers.clear();
    const held = [...this.#held.values()];
    this.#held.clear();
    for (const lock of held) {
      lock.released = true;
      lock.client.release(true);
    }
    await this.turns?.close();
  }

  // --- internals -----------------------------------------------------------

  /**
   * Whether a commit whose answer was lost was stored: the messages at its
   * version are its own, and the record is at that version with its state,
   * or (its messages telling it apart) a later one. The server may still be
   * running the statement (waiting on the row, say), so the session it ran
   * on is ended first, which rolls back a statement not yet done: what is
   * read then is final. False when it cannot tell within LANDED_CHECK_MS
   * (the server may still be gone): the turn is then reported failed, and
   * the check stops, so no query of it runs once the turn was answered.
   */
  async #landed(key: string, version: number, state: string, append: string, session: HeldLock['session']): Promise<boolean> {
    const appended = JSON.parse(append) as unknown[];
    const until = Date.now() + LANDED_CHECK_MS;
    const stop = new AbortController();
    const once = async (): Promise<boolean> => {
      if (session !== undefined) await endSession(this.#pool, this.#sql, session, stop.signal, LANDED_CHECK_MS);
      stop.signal.throwIfAborted();
      const row = (await this.#pool.query(this.#sql.landed, [key, version])).rows[0];
      if (row === undefined || !isDeepStrictEqual(JSON.parse(String(row['messages'])), appended)) return false;
      const now = Number(row['version']);
      return now === version ? String(row['state']) === state : appended.length > 0 && now > version && sameRecord(now, version);
    };
    // Tried until the time is up: what lost the answer (a restarting server, a network blip) often fails the next
    // connection too, and the commit may have applied.
    const check = (async () => {
      for (let attempt = 0; !stop.signal.aborted; attempt++) {
        try {
          return await once();
        } catch {
          if (Date.now() >= until) return false;
        }
        await delay(backoff(attempt, 200), stop.signal).catch(() => undefined);
      }
      return false;
    })();
    let timer: NodeJS.Timeout | undefined;
    const giveUp = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), LANDED_CHECK_MS);
    });
    try {
      return await Promise.race([check, giveUp]);
    } finally {
      clearTimeout(timer);
      stop.abort();
    }
  }

  #key(agentId: string): string {
    assertStorableId(agentId, 'postgresStorage');
    return idDigest(agentId).toString('hex');
  }

  /** 64 bits of SHA-256 over the table namespace and the id; a rare collision only serializes two ids. */
  #lockKey(agentId: string): string {
    assertStorableId(agentId, 'postgresStorage');
    const digest = createHash('sha256').update(`${this.#tables.namespace}\n${agentId}`, 'utf8').digest();
    return digest.readBigInt64BE(0).toString();
  }

  /** Creates the tables once; resolves whether the server enforces leases (Postgres 14+). */
  #init(): Promise<boolean> {
    this.#ready ??= (async () => {
      if (this.#ddl !== undefined) {
        // One simple-protocol query runs as one transaction, so the xact lock covers the DDL.
        await this.#pool.query(`SELECT pg_advisory_xact_lock(${DDL_LOCK_KEY});\n${this.#ddl}`);
      }
      const { rows } = await this.#pool.query(this.#sql.serverVersion);
      return Number(rows[0]?.['version']) >= 140000;
    })().catch((error: unknown) => {
      this.#ready = undefined;
      throw error;
    });
    return this.#ready;
  }

  /**
   * Through the lock's own session while this storage holds the id, so a turn never waits for a second
   * connection; but not behind its commit (a GET state meanwhile): the turn itself reads nothing then.
   */
  #query(agentId: string, text: string, values: unknown[]): Promise<PgQueryResultLike> {
    const held = this.#held.get(agentId);
    if (held !== undefined && held.broken === undefined && !held.committing) return held.client.query(text, values);
    return this.#pool.query(text, values);
  }
}
