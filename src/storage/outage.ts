import { AgentRouterError, StorageUnavailableError } from '../errors.ts';

/**
 * Tells a storage outage from every other failure, at the built-in storages'
 * boundary: an outage is answered 503 `storage_unavailable` with
 * `Retry-After` (the same request succeeds once the storage is back), all
 * else stays what it was (500 `internal_error` unless it is an
 * AgentRouterError already).
 *
 * An outage: the storage cannot be reached or cannot serve anyone now,
 * whatever the request. Not one: the storage answered and refused this
 * statement or record (a constraint, a damaged record, a missing table, bad
 * credentials, a `lock_timeout` or `statement_timeout` the operator set),
 * which a retry meets again until code, data or configuration is fixed.
 */

/** A connection that could not be made, or broke (Node's socket errors, as pg, node-redis and ioredis pass them on). */
const NETWORK_CODES: ReadonlySet<string> = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'EHOSTDOWN', 'ENETUNREACH', 'ENETDOWN',
  'ENOTFOUND', 'EAI_AGAIN',
]);

/**
 * Postgres SQLSTATEs of a server that cannot serve now: the connection
 * failed (class 08), the session was ended by a shutdown, a crash, an
 * operator or its idle timeout (57P01-03, 57P05; not 57P04, a dropped
 * database, which no retry brings back), the server ran out of disk, memory
 * or connections (53100-53300; not 53400, a configured limit), its own disk
 * failed (58000, 58030), or it is a read-only standby (25006, a failover).
 */
const PG_STATES: ReadonlySet<string> = new Set(['57P01', '57P02', '57P03', '57P05', '53100', '53200', '53300', '58000', '58030', '25006']);

/** pg and pg-pool's own errors (they carry no code): a connection lost or never made, a client-side timeout, a pool ended. */
const PG_MESSAGES = /^(Connection terminated|timeout exceeded when trying to connect|timeout expired|Query read timeout|Client has encountered a connection error|Client was closed and is not queryable|Cannot use a pool after calling end)/;

/**
 * node-redis's and ioredis's errors for a client that cannot reach its
 * server, by class (their `name` is "Error"): closed, offline, reconnecting,
 * timed out waiting for an answer.
 */
const REDIS_CLASSES: ReadonlySet<string> = new Set([
  'ClientClosedError', 'ClientOfflineError', 'SocketClosedUnexpectedlyError', 'ConnectionTimeoutError', 'SocketTimeoutError',
  'ReconnectStrategyError', 'RootNodesUnavailableError', 'TimeoutError', 'MaxRetriesPerRequestError', 'ClusterAllFailedError',
]);

/** ioredis's (and node-redis's queue's) errors by message. */
const REDIS_MESSAGES = /^(Connection is closed\.|Stream isn't writeable|Command timed out|The queue is full|None of startup nodes is available)/;

/**
 * Redis error replies of a server that cannot serve now: loading its data,
 * busy with a script, a replica without its master or read-only during a
 * failover, a cluster reconfiguring, out of memory, or unable to persist.
 * Not NOAUTH, WRONGPASS, NOPERM (configuration), nor ERR or WRONGTYPE.
 */
const REDIS_REPLIES = /^(LOADING|BUSY|MASTERDOWN|READONLY|TRYAGAIN|CLUSTERDOWN|NOREPLICAS|OOM|MISCONF) /;

/**
 * FileStorage: the disk failed, is full or read-only, or the process has no
 * file descriptor left. Not EACCES or EPERM (the directory's permissions, a
 * configuration as bad credentials are), nor ENOTDIR, EISDIR or ELOOP (a
 * file, a directory or a link where it should not be): no retry gets past them.
 */
const DISK_CODES: ReadonlySet<string> = new Set(['EIO', 'ENOSPC', 'EDQUOT', 'EROFS', 'EMFILE', 'ENFILE']);

export type Backend = 'postgresStorage' | 'redisStorage' | 'FileStorage';

/** Whether `error`, thrown by `backend`'s driver or file system, means the storage is unavailable. */
export function isOutage(error: unknown, backend: Backend): boolean {
  if (!(error instanceof Error) || error instanceof AgentRouterError) return false;
  const code = (error as { code?: unknown }).code;
  if (backend === 'FileStorage') return typeof code === 'string' && DISK_CODES.has(code);
  if (typeof code === 'string' && NETWORK_CODES.has(code)) return true;
  if (backend === 'postgresStorage') {
    // A Unix socket that is not there: the server is not running.
    if (code === 'ENOENT' && (error as { syscall?: unknown }).syscall === 'connect') return true;
    // A SQLSTATE: the server reported it.
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return code.startsWith('08') || PG_STATES.has(code);
    return PG_MESSAGES.test(error.message);
  }
  return REDIS_CLASSES.has(error.constructor.name) || REDIS_MESSAGES.test(error.message) || REDIS_REPLIES.test(error.message);
}

/**
 * A rethrower for `backend`'s public methods (`.catch(outage)`): an outage
 * becomes StorageUnavailableError (the error as its cause), anything else is
 * thrown as it is.
 */
export function rethrowOutage(backend: Backend): (error: unknown) => never {
  return (error) => {
    throw isOutage(error, backend) ? new StorageUnavailableError(backend, error) : error;
  };
}
