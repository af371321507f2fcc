/**
 * What postgresStorage needs of `pg` (the shapes of a pool and its clients,
 * what an error tells of the session), and the steps of a turn's lock: a
 * session advisory lock on a client taken from the pool for the turn.
 */
import type { statements } from './postgres-sql.ts';
import { backoff, delay, untilAborted } from './wait.ts';

type Statements = ReturnType<typeof statements>;

/** The part of a `pg` query result this storage reads. */
export interface PgQueryResultLike {
  rows: Array<Record<string, unknown>>;
}

/** Anything that runs a parameterized query the way `pg` does (`$1`, `$2`, ...). */
export interface PgQueryable {
  query(text: string, values?: unknown[]): Promise<PgQueryResultLike>;
}

/** A client checked out of the pool, as `pg.PoolClient`. */
export interface PgPoolClientLike extends PgQueryable {
  /** Back to the pool; with an error (or `true`) the pool closes the connection instead. */
  release(error?: Error | boolean): void;
  on?(event: 'error', listener: (error: Error) => void): unknown;
  removeListener?(event: 'error', listener: (error: Error) => void): unknown;
}

/** The shape of `pg.Pool` this storage uses: `query` and `connect`. The library never imports `pg`. */
export interface PgPoolLike extends PgQueryable {
  connect(): Promise<PgPoolClientLike>;
}

/** A lock held on a client of the pool: its session, and what became of it. */
export interface HeldLock {
  client: PgPoolClientLike;
  /** Its session: the backend's pid, and a server time it was running at; known once the lock query answered. */
  session: { pid: number; since: string } | undefined;
  /** Set when the session died (lease expired, connection lost): queries go to the pool again. */
  broken: Error | undefined;
  /** The client went back to the pool (unlock or close); never release it twice. */
  released: boolean;
  /** A commit runs on the client: other reads go to the pool, not behind it (it may wait on its row for long). */
  committing: boolean;
}

/** How long unlock waits for the server; past that the connection is closed instead, which ends the lock too. */
const UNLOCK_WAIT_MS = 5000;

/** An error the server reported (it has a SQLSTATE): its statement was not applied. Otherwise the connection failed. */
export function reportedByServer(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code);
}

/** The server ended the session (57P01 pg_terminate_backend, 57P02 crash, 57P05 idle timeout, ...): its lock went with it. */
export function sessionEnded(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('57P0');
}

/**
 * `pool.connect()`, given up when `signal` aborts: a pool whose server stopped
 * answering (or that has no free connection) would otherwise hold the turn,
 * and every turn queued behind it, for ever. A client that arrives after
 * the abort goes back to the pool.
 */
export function connectUnlessAborted(pool: PgPoolLike, signal: AbortSignal | undefined): Promise<PgPoolClientLike> {
  if (signal === undefined) return pool.connect();
  signal.throwIfAborted();
  return new Promise<PgPoolClientLike>((resolve, reject) => {
    let gaveUp = false;
    const onAbort = (): void => {
      gaveUp = true;
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    pool.connect().then(
      (client) => {
        signal.removeEventListener('abort', onAbort);
        if (gaveUp) client.release();
        else resolve(client);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

/** Ends a backend's session and waits (up to `waitMs`) until the server no longer lists it; gives up when `signal` aborts. */
export async function endSession(pool: PgQueryable, sql: Statements, { pid, since }: NonNullable<HeldLock['session']>, signal: AbortSignal, waitMs: number): Promise<void> {
  const until = Date.now() + waitMs;
  signal.throwIfAborted();
  await pool.query(sql.terminate, [pid, since]);
  for (let attempt = 0; ; attempt++) {
    signal.throwIfAborted();
    if ((await pool.query(sql.alive, [pid, since])).rows.length === 0) return;
    if (Date.now() > until) throw new Error(`backend ${pid} did not end`);
    await delay(backoff(attempt, 100), signal);
  }
}


/** Waits on `client` for the advisory lock; an abort cancels the wait from another connection. */
export async function waitForLock(pool: PgQueryable, sql: Statements, client: PgPoolClientLike, lockKey: string, pid: number, signal: AbortSignal | undefined): Promise<void> {
  signal?.throwIfAborted();
  let settled = false;
  const onAbort = async (): Promise<void> => {
    // The waiting statement blocks its connection, so it is cancelled from another; Postgres ignores a cancel that lands
    // before the statement arrives, hence the retries until it settles.
    for (let attempt = 0; !settled; attempt++) {
      await pool.query(sql.cancel, [pid]).catch(() => undefined);
      if (!settled) await delay(backoff(attempt, 100));
    }
  };
  const listener = (): void => void onAbort();
  signal?.addEventListener('abort', listener, { once: true });
  try {
    await client.query(sql.waitLock, [lockKey]);
  } catch (error) {
    if (signal?.aborted === true) throw signal.reason;
    throw error;
  } finally {
    settled = true;
    signal?.removeEventListener('abort', listener);
  }
}


/** Pings the lock's session every third of the lease, so the server keeps it; a failed ping marks it broken. */
export function startPings(held: HeldLock, sql: Statements, leaseMs: number): NodeJS.Timeout {
  const timer = setInterval(() => {
    // A session running a commit is not idle, so the server keeps it; a ping would only queue behind it.
    if (held.broken !== undefined || held.committing) return;
    held.client.query(sql.ping).catch((error: unknown) => {
      held.broken ??= error instanceof Error ? error : new Error(String(error));
    });
  }, Math.max(1, Math.floor(leaseMs / 3)));
  timer.unref();
  return timer;
}


/** Releases the lock (restoring the session's prior idle timeout) and gives the client back to the pool. */
export async function unlock(held: HeldLock, sql: Statements, lockKey: string, prior: string | undefined): Promise<void> {
  if (held.released) return;
  held.released = true;
  if (held.broken !== undefined) {
    held.client.release(held.broken);
    return;
  }
  try {
    const unlocking = prior === undefined
      ? held.client.query(sql.unlock, [lockKey])
      : held.client.query(sql.unlockAndRestore, [lockKey, prior]);
    // The turn's answer waits on this: a server that stopped answering would hold it for as long as TCP
    // takes to give up (minutes), though the turn is stored.
    await untilAborted(unlocking, AbortSignal.timeout(UNLOCK_WAIT_MS));
    held.client.release();
  } catch (error) {
    // Not rethrown: closing the connection ends the session, which releases
    // the lock just as surely, and the turn itself has already completed.
    held.client.release(error instanceof Error ? error : true);
  }
}
