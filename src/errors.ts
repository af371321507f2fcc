import { validateHeaderName, validateHeaderValue } from 'node:http';

/**
 * One error family for the whole library. Every error that reaches the wire
 * is an `AgentRouterError` with an HTTP `status`, a stable machine `code` and
 * an `expose` flag (koa's rule: 4xx messages are shown to the caller, 5xx
 * messages are logged and replaced by a generic one).
 */
export class AgentRouterError extends Error {
  override name = 'AgentRouterError';
  readonly status: number;
  readonly code: string;
  readonly expose: boolean;
  /** Extra response headers, e.g. `Allow` for 405 or `Retry-After` for 429. */
  readonly headers: Readonly<Record<string, string>> | undefined;
  /**
   * What an exposed error tells the caller when `message` holds what only
   * the operator should see (an internal address); `message` is then logged.
   */
  readonly publicMessage: string | undefined;
  /** Fields an exposed error's JSON body carries beside `error` and `code` (approval_pending's list). */
  readonly extra: Readonly<Record<string, unknown>> | undefined;

  constructor(
    status: number,
    code: string,
    message: string,
    options: { cause?: unknown; expose?: boolean | undefined; headers?: Record<string, string> | undefined; publicMessage?: string | undefined; extra?: Record<string, unknown> | undefined } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    // Checked here, where the mistake is, rather than when Node refuses to write the answer.
    if (!Number.isInteger(status) || status < 400 || status > 599) {
      throw new TypeError(`AgentRouterError: status must be an HTTP error status, an integer from 400 to 599; got ${String(status)}`);
    }
    if (options.headers !== undefined) {
      for (const name in options.headers) {
        validateHeaderName(name);
        validateHeaderValue(name, options.headers[name] as string);
      }
    }
    this.status = status;
    this.code = code;
    this.expose = options.expose ?? status < 500;
    this.headers = options.headers;
    this.publicMessage = options.publicMessage;
    this.extra = options.extra;
  }
}

/** `AgentRegistry.resolve` found no pattern for the id (a ValueError in ai-query's Python registry); 404 on the wire. */
export class AgentNotFoundError extends AgentRouterError {
  override name = 'AgentNotFoundError';
  readonly agentId: string;
  constructor(agentId: string) {
    super(404, 'agent_not_found', `AgentRegistry: no pattern matches agent id ${JSON.stringify(agentId)}`);
    this.agentId = agentId;
  }
}

/** A storage commit lost a race: another writer committed a newer version first. */
export class VersionConflictError extends AgentRouterError {
  override name = 'VersionConflictError';
  constructor(agentId: string, expected: number, actual: number | undefined) {
    super(
      409,
      'version_conflict',
      `Storage: agent ${JSON.stringify(agentId)} is at version ${actual ?? 'unknown'}, expected ${expected}`,
      { expose: false },
    );
  }
}

/**
 * A commit by a turn whose storage lock was lost mid-turn (its lease ran out,
 * its connection dropped): another process may hold the lock now, so the
 * turn is refused rather than written beside that process's turn.
 */
export class LockLostError extends AgentRouterError {
  override name = 'LockLostError';
  constructor(agentId: string, storage: string, how: string) {
    super(409, 'lock_lost', `${storage}: the lock on agent ${JSON.stringify(agentId)} was lost during the turn (${how}); the turn was not committed`, {
      expose: false,
    });
  }
}

/** Seconds a client is asked to wait after `storage_unavailable`: a server restarting or a client reconnecting takes a few. */
const STORAGE_RETRY_AFTER = 5;

/**
 * A storage could not be reached or could not serve now (its server down or
 * restarting, the connection lost, its disk full or failing): 503 with
 * `Retry-After`, since the same request succeeds once the storage is back.
 * The storage's own error is the `cause` and goes to the log; the caller is
 * told only that storage is unavailable. The built-in storages throw it for
 * the failures `src/storage/outage.ts` lists; a storage of your own may too.
 */
export class StorageUnavailableError extends AgentRouterError {
  override name = 'StorageUnavailableError';
  /** `backend` names the storage in the log, e.g. "postgresStorage"; `cause` is its own error. */
  constructor(backend: string, cause: unknown) {
    const detail = cause instanceof Error ? cause.message || cause.constructor.name : String(cause);
    const code = (cause as { code?: unknown } | null)?.code;
    super(503, 'storage_unavailable', `${backend}: storage unavailable: ${detail}${typeof code === 'string' && !detail.includes(code) ? ` (${code})` : ''}`, {
      expose: true,
      cause,
      headers: { 'Retry-After': String(STORAGE_RETRY_AFTER) },
      publicMessage: 'Storage is unavailable; retry shortly',
    });
  }
}

/** A remote target (HTTPTransport) or model provider failed; 502, or 504 for a timeout. */
export class UpstreamError extends AgentRouterError {
  override name = 'UpstreamError';
}

export function isAgentRouterError(error: unknown): error is AgentRouterError {
  return error instanceof AgentRouterError;
}

/** The JSON body for an error: exposed messages as they are, everything else generic. */
export function errorBody(error: unknown): { error: string; code: string } {
  if (error instanceof AgentRouterError && error.expose) return { error: error.publicMessage ?? error.message, code: error.code, ...error.extra };
  if (error instanceof AgentRouterError && error.status !== 500) return { error: 'Request failed', code: error.code };
  return { error: 'Internal error', code: 'internal_error' };
}

export function statusOf(error: unknown): number {
  return error instanceof AgentRouterError ? error.status : 500;
}

/**
 * Whether a failure goes to the operator's log: a 5xx, but for our own 503s
 * (shutting down, a stream cap), which are expected, and our own 501s (a
 * client's transfer coding, approvals through a transport of your own). A
 * remote's 503 is logged: a load balancer refusing for ever shows nowhere
 * else; so is a storage's, with the error it met.
 */
export function worthLogging(error: unknown): boolean {
  const status = statusOf(error);
  if (status === 501 && !(error instanceof UpstreamError)) return false;
  return status >= 500 && (status !== 503 || error instanceof UpstreamError || error instanceof StorageUnavailableError);
}

/** Shorthand constructors for the errors the HTTP layer raises. */
export const httpErrors = {
  badRequest: (code: string, message: string) => new AgentRouterError(400, code, message),
  notFound: (code: string, message: string) => new AgentRouterError(404, code, message),
  methodNotAllowed: (allow: string) =>
    new AgentRouterError(405, 'method_not_allowed', `Method not allowed; use ${allow}`, { headers: { Allow: allow } }),
  /**
   * `closeConnection` when nothing reads the rest of the upload: it would be parsed as the next
   * request. The router's own body reader reads and drops it instead (see discardRest).
   */
  payloadTooLarge: (limit: number, closeConnection = false) =>
    new AgentRouterError(413, 'body_too_large', `Request body is larger than the limit of ${limit} bytes`, closeConnection ? { headers: { Connection: 'close' } } : {}),
  unsupportedMediaType: (type: string) =>
    new AgentRouterError(
      415,
      'unsupported_media_type',
      `Content-Type ${JSON.stringify(type)} is not supported; send JSON with Content-Type: application/json`,
    ),
  untypedBody: () =>
    new AgentRouterError(415, 'unsupported_media_type', 'The request body has no Content-Type; send JSON with Content-Type: application/json'),
  unavailable: (message = 'Server is shutting down') => new AgentRouterError(503, 'shutting_down', message, { expose: true }),
};

/**
 * A model provider (OpenAI-compatible, Anthropic) failed. `status` is what the
 * router answers (502, or 504 for `model_timeout`); the provider's own HTTP
 * status and error type are kept beside it for logs. The message never holds
 * the API key. `retryable` marks failures worth another attempt (408, 409, 429,
 * 5xx, a dropped connection) when nothing has been streamed yet.
 */
export class ModelProviderError extends UpstreamError {
  override name = 'ModelProviderError';
  /** `openai` or `anthropic`. */
  readonly provider: string;
  /** The provider's HTTP status, when it answered one. */
  readonly providerStatus: number | undefined;
  /** The provider's error type, e.g. `invalid_request_error`, `overloaded_error`. */
  readonly providerType: string | undefined;
  readonly retryable: boolean;
  /** Seconds the provider asked to wait (`Retry-After`), when it did. */
  readonly retryAfter: number | undefined;

  constructor(
    code: string,
    message: string,
    options: {
      provider: string;
      status?: number | undefined;
      providerStatus?: number | undefined;
      providerType?: string | undefined;
      retryable?: boolean | undefined;
      retryAfter?: number | undefined;
      cause?: unknown;
    },
  ) {
    // The provider's Retry-After goes on to the caller, who can then back off as long as it asked.
    const retryAfter = options.retryAfter;
    const headers = retryAfter === undefined ? undefined : { 'Retry-After': String(Math.ceil(retryAfter)) };
    super(options.status ?? 502, code, message, headers === undefined ? { cause: options.cause } : { cause: options.cause, headers });
    this.provider = options.provider;
    this.providerStatus = options.providerStatus;
    this.providerType = options.providerType;
    this.retryable = options.retryable ?? false;
    this.retryAfter = options.retryAfter;
  }
}

/**
 * A bad value as an error message names it: a string quoted (its first 40
 * characters), a number, boolean, null or undefined as itself, anything else
 * by its kind (never a function's source or an object's contents).
 */
export function describeValue(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.slice(0, 40));
  if (typeof value === 'number' || typeof value === 'boolean' || value === null || value === undefined) return String(value);
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}
