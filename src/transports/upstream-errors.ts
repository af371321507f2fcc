import { AgentRouterError, UpstreamError } from '../errors.ts';
import { fetchFailure, noTlsFix } from '../lib/fetch-failure.ts';

/**
 * The errors HTTPTransport throws, by what went wrong. `remote` is the origin
 * and path of the route (never credentials, never the query). Messages name
 * the remote and the fix, for the operator (the router logs them); what the
 * caller is answered (`publicMessage`) does not name it, since the remote is
 * often an internal address. None quotes the remote's body except an error it
 * sent for its caller (a 4xx `{"error"}` or an SSE `event: error`), which is
 * relayed with its status and code, its message saying which remote origin
 * sent it, and the `Agent-Router-Upstream` header naming that origin.
 */

/** The response header naming the remote agent server's origin a relayed error came from. */
export const UPSTREAM_HEADER = 'Agent-Router-Upstream';

/** What a remote's own stable code must look like to be relayed. */
const CODE = /^[a-z][a-z0-9_]{0,63}$/;

/**
 * The 4xx statuses a remote router answers about the caller's request (its
 * body, its agent id, its rate), relayed as they are. Any other is about the
 * hop itself and is the operator's to fix, so the caller gets a 502: 401 and
 * 403 refuse the transport's credentials, 404 `not_found` and 405 mean the
 * url points at no agent router, 499 that the remote saw this transport hang
 * up (not the caller, who is still there to be answered); unless it is an
 * action's own (see `HOP_STATUSES`).
 */
const RELAYED_STATUSES: ReadonlySet<number> = new Set([400, 404, 409, 413, 415, 422, 429]);

/**
 * The 4xx statuses only ever about the hop: its credentials (401, 407), a
 * url that is no agent router (405), how the transport sent the request
 * (408, 411, 414, 417, 421, 426, 431), or its hanging up (499). Another 4xx
 * carrying our routers' `{"error", "code"}` body is an action's own answer
 * (`throw new AgentRouterError(410, 'expired', ...)`, a 403 `not_owner`),
 * relayed as the remote gave it, unless its code is one of HOP_CODES.
 */
const HOP_STATUSES: ReadonlySet<number> = new Set([401, 405, 407, 408, 411, 414, 417, 421, 426, 431, 499]);
/** What our routers answer about the hop: the remote's authorize hook, its allowedHosts, a path that is no agent's. */
const HOP_CODES: ReadonlySet<unknown> = new Set(['unauthorized', 'forbidden', 'host_not_allowed', 'not_found']);

/** Whether a 4xx is about the caller's request, to relay (see RELAYED_STATUSES and HOP_STATUSES). */
function aboutTheRequest(status: number, fields: Record<string, unknown>): boolean {
  if (HOP_STATUSES.has(status) || HOP_CODES.has(fields['code'])) return false;
  if (RELAYED_STATUSES.has(status)) return true;
  // A gateway's own refusal (an HTML page, `{"message"}`) has no such body: it stays the operator's to fix.
  return typeof fields['error'] === 'string' && typeof fields['code'] === 'string' && CODE.test(fields['code']);
}

/** A failed fetch, before any response: the remote was not reached, the connection broke, it answered something that is not HTTP, or fetch's own timeout. */
export function fetchFailed(remote: string, cause: unknown): UpstreamError {
  const { kind, code } = fetchFailure(cause);
  if (kind === 'fetch_timeout') return fetchTimedOut(remote, code, cause);
  if (kind === 'not_http') return notHttpAnswer(remote, code, cause);
  // It answered, with more header bytes than Node's fetch reads (16 KiB by default, `--max-http-header-size`).
  if (kind === 'headers_overflow') return badResponse(remote, "headers larger than Node's fetch accepts", cause);
  if (kind === 'connection_broken') {
    return new UpstreamError(502, 'upstream_interrupted', `HTTPTransport: the connection to ${remote} broke off before it answered (${code}); the request may have reached it`, {
      expose: true,
      cause,
      publicMessage: 'The connection to the remote agent broke off before it answered',
    });
  }
  if (kind === 'no_tls') return noTls(remote, code, noTlsFix(code, 'url'), cause);
  return unreachable(remote, cause, code);
}

/**
 * No TLS connection: the remote's certificate was refused, or an https url
 * points at a port that does not speak TLS (see noTlsFix). Nothing was sent.
 */
function noTls(remote: string, code: string, fix: string, cause: unknown): UpstreamError {
  return new UpstreamError(502, 'upstream_unreachable', `HTTPTransport: no TLS connection to ${remote} (${code}); ${fix}`, {
    expose: true,
    cause,
    publicMessage: 'The remote agent could not be reached',
  });
}

/** A failed read of the body, while the remote was answering. */
export function readFailed(remote: string, cause: unknown): UpstreamError {
  const { kind, code } = fetchFailure(cause);
  if (kind === 'fetch_timeout') return fetchTimedOut(remote, code, cause);
  return kind === 'not_http' ? notHttpAnswer(remote, code, cause) : interrupted(remote, cause);
}

function fetchTimedOut(remote: string, code: string, cause: unknown): UpstreamError {
  return new UpstreamError(504, 'upstream_timeout', `HTTPTransport: Node's fetch stopped waiting for ${remote} (${code}: undici's own headersTimeout and bodyTimeout, 300 s by default, cap the transport's timeout); to wait longer, pass a fetch bound to an undici dispatcher with longer ones`, {
    expose: true,
    cause,
    publicMessage: 'The remote agent sent nothing for too long',
  });
}

function unreachable(remote: string, cause: unknown, code: string | undefined): UpstreamError {
  const detail = code !== undefined ? ` (${code})` : '';
  return new UpstreamError(502, 'upstream_unreachable', `HTTPTransport: could not reach ${remote}${detail}; check that the remote is up and the url is right`, {
    expose: true,
    cause,
    publicMessage: 'The remote agent could not be reached',
  });
}

/** The remote was reached and answered, but not in HTTP: `upstream_bad_response`, as for an answer of the wrong shape. */
function notHttpAnswer(remote: string, code: string, cause: unknown): UpstreamError {
  return new UpstreamError(502, 'upstream_bad_response', `HTTPTransport: ${remote} answered with something that is not HTTP (${code}); check that the url's host and port are the remote router's`, {
    expose: true,
    cause,
    publicMessage: 'The remote agent answered with something that is not HTTP',
  });
}

export function timedOut(remote: string, seconds: number): UpstreamError {
  return new UpstreamError(504, 'upstream_timeout', `HTTPTransport: ${remote} sent nothing for ${seconds} s; check the remote or raise the timeout option`, {
    expose: true,
    publicMessage: `The remote agent sent nothing for ${seconds} s`,
  });
}

/** Every connection slot (maxConnections) stayed in use for `seconds`: the remote was never asked. */
export function allSlotsBusy(remote: string, seconds: number): UpstreamError {
  return new UpstreamError(503, 'upstream_busy', `HTTPTransport: all maxConnections requests to ${remote} stayed in flight for ${seconds} s (long streams, or clients reading slowly); raise maxConnections, or retry`, {
    expose: true,
    headers: { 'Retry-After': '1' },
    publicMessage: 'Every connection to the remote agent is in use; retry shortly',
  });
}

function interrupted(remote: string, cause: unknown): UpstreamError {
  return new UpstreamError(502, 'upstream_interrupted', `HTTPTransport: the connection to ${remote} broke off mid-response`, {
    expose: true,
    cause,
    publicMessage: 'The connection to the remote agent broke off mid-response',
  });
}

export function incomplete(remote: string): UpstreamError {
  return new UpstreamError(502, 'upstream_incomplete', `HTTPTransport: the stream from ${remote} ended without "event: done"`, {
    expose: true,
    publicMessage: 'The remote agent\'s stream ended without "event: done"',
  });
}

/** A 2xx answer that is not what the route promises. */
export function badResponse(remote: string, what: string, cause?: unknown): UpstreamError {
  return new UpstreamError(502, 'upstream_bad_response', `HTTPTransport: ${remote} answered with ${what}`, {
    expose: true,
    cause,
    publicMessage: `The remote agent answered with ${what}`,
  });
}

/**
 * A non-2xx answer. A 4xx about the caller's request (RELAYED_STATUSES, or
 * an action's own) carrying a JSON `{"error"}` is relayed with its status,
 * message, code and a numeric Retry-After; a 429 or 413 without one stays a
 * 429 or 413 (see `refusedByGateway`); our routers' own 502 is relayed (see
 * `failedThere`), a 503 as a 503 (see `unavailable`), a 504 as a 504 (see
 * `timedOutThere`); a
 * 3xx (other than a 307/308 within the origin, followed before), any other 5xx, any other 4xx, or a 4xx without such
 * a body is a 502 that names only the remote.
 */
export function statusError(remote: string, origin: string, status: number, body: unknown, retryAfter: string | null): AgentRouterError {
  if (status === 502) return failedThere(remote, origin, body, retryAfter);
  if (status === 503) return unavailable(remote, origin, body, retryAfter);
  if (status === 504) return timedOutThere(remote, origin, body);
  if (status >= 300 && status < 400) {
    return new UpstreamError(502, 'upstream_redirect', `HTTPTransport: ${remote} answered ${status} (a redirect); only a 307 or 308 within its origin is followed, so set the url to where the remote really is`, {
      expose: true,
      publicMessage: `The remote agent answered ${status} (a redirect)`,
    });
  }
  if (status < 400 || status >= 500) return answered(remote, status);
  const fields = asFields(body);
  if (!aboutTheRequest(status, fields)) {
    // Named only if it is a code as our routers write them: it goes into this router's log.
    const said = typeof fields['code'] === 'string' && CODE.test(fields['code']) ? ` (${fields['code']})` : '';
    return new UpstreamError(502, 'upstream_refused', `HTTPTransport: ${remote} answered ${status}${said}; check the transport's url and headers`, {
      expose: true,
      publicMessage: `The remote agent refused the request (${status})`,
    });
  }
  const message = fields['error'];
  if (typeof message !== 'string' && (status === 429 || status === 413)) return refusedByGateway(remote, status, retryAfter);
  if (typeof message !== 'string') {
    return new UpstreamError(502, 'upstream_bad_response', `HTTPTransport: ${remote} answered ${status} without a JSON error body`, {
      expose: true,
      publicMessage: `The remote agent answered ${status} without a JSON error body`,
    });
  }
  return relayed(origin, status, relayedCode(fields['code'], 'upstream_error'), message, retryAfterHeader(retryAfter));
}

/**
 * The statuses the caller learns from whatever the body, even one too large
 * or cut short: a 503 or 504 (see `unavailable`, `timedOutThere`), and a 429
 * or 413 (see `refusedByGateway`).
 */
export const KEPT_STATUSES: ReadonlySet<number> = new Set([413, 429, 503, 504]);

/**
 * A 429 or 413 without our routers' `{"error"}` body: a gateway before the
 * remote (an HTML page, AWS's or Kong's `{"message"}`) rate limiting the
 * transport, or refusing the body as too large. Either is about the
 * caller's requests, who should back off or send less, so it stays a 429
 * (with its numeric Retry-After) or 413, as a 503 stays a 503; the body is
 * never quoted.
 */
function refusedByGateway(remote: string, status: 429 | 413, retryAfter: string | null): UpstreamError {
  const [code, what, publicMessage] = status === 429
    ? ['upstream_rate_limited', 'rate limited', 'The remote agent is rate limiting requests (429); try again later']
    : ['upstream_body_too_large', 'body too large', 'The remote agent refused the request body as too large (413)'];
  return new UpstreamError(status, code, `HTTPTransport: ${remote} answered ${status} (${what}) without our routers' error body`, {
    expose: true,
    publicMessage,
    ...retryAfterHeader(retryAfter),
  });
}

/** A 5xx not relayed: a 502 that names only the remote, never the body (a 5xx body can name internal hosts). */
function answered(remote: string, status: number): UpstreamError {
  return new UpstreamError(502, 'upstream_error', `HTTPTransport: ${remote} answered ${status}; see the remote's logs`, {
    expose: true,
    publicMessage: `The remote agent answered ${status}`,
  });
}

/**
 * The 502s our own routers answer: their own remote (`upstream_*`) or their
 * model provider (`model_*`) failed. Their messages name neither (a model's
 * is "Request failed").
 */
const OWN_FAILURES: ReadonlySet<unknown> = new Set([
  'upstream_unreachable', 'upstream_interrupted', 'upstream_bad_response', 'upstream_error', 'upstream_refused', 'upstream_redirect',
  'upstream_incomplete', 'upstream_stream_error', 'model_auth_failed', 'model_not_found', 'model_rate_limited', 'model_unavailable',
  'model_request_rejected', 'model_redirect', 'model_stream_error', 'model_bad_response', 'model_refused', 'model_connection_failed',
  'model_stream_interrupted',
]);

/**
 * A 502: a remote router whose own remote or model provider failed (a hop
 * further down is down), or a gateway before the remote. Our routers' own
 * 502s are relayed with their code, message and numeric Retry-After (a
 * model's `model_rate_limited` carries one), as a stream relays them, so a
 * caller two hops away learns what failed; any other body is never quoted.
 */
function failedThere(remote: string, origin: string, body: unknown, retryAfter: string | null): UpstreamError {
  return ownAnswer(origin, 502, body, OWN_FAILURES, retryAfterHeader(retryAfter)) ?? answered(remote, 502);
}

/** The 503s our own routers answer, relayed with their message: nothing in them names the remote (nor its storage). */
const OWN_UNAVAILABLE: ReadonlySet<unknown> = new Set(['shutting_down', 'too_many_streams', 'upstream_busy', 'upstream_unavailable', 'storage_unavailable']);

/**
 * A 503: the remote is shutting down (a rolling deploy), out of room, its
 * storage is unavailable, or a load balancer before it has no healthy
 * backend. All pass, and a 502 would tell the caller the hop is broken, so
 * it stays a 503, with the remote's numeric Retry-After. Our routers' own
 * 503s (`shutting_down`, `storage_unavailable`, ...) are relayed as a
 * stream relays them; any other body is `upstream_unavailable`, never
 * quoted (a 5xx body can name internal hosts).
 */
function unavailable(remote: string, origin: string, body: unknown, retryAfter: string | null): UpstreamError {
  const headers = retryAfterHeader(retryAfter);
  return ownAnswer(origin, 503, body, OWN_UNAVAILABLE, headers) ?? new UpstreamError(503, 'upstream_unavailable', `HTTPTransport: ${remote} answered 503 (unavailable for now)`, {
    expose: true,
    publicMessage: 'The remote agent is unavailable for now (503); try again later',
    ...headers,
  });
}

/** The 504s our own routers answer: the remote agent's turn, its own remote or its model provider timed out. */
const OWN_TIMEOUTS: ReadonlySet<unknown> = new Set(['turn_timeout', 'upstream_timeout', 'model_timeout']);

/**
 * A 504: the remote (or a gateway before it) timed out, which is what the
 * caller is told, as a 504, not a 502 saying the hop is broken. Our routers'
 * own 504s are relayed with their message, as a stream relays them; any
 * other body is never quoted.
 */
function timedOutThere(remote: string, origin: string, body: unknown): UpstreamError {
  return ownAnswer(origin, 504, body, OWN_TIMEOUTS, {}) ?? new UpstreamError(504, 'upstream_timeout', `HTTPTransport: ${remote} answered 504 (it timed out); see the remote's logs`, {
    expose: true,
    publicMessage: 'The remote agent timed out (504)',
  });
}

/**
 * A 5xx one of our own routers answered (a body `{"error", "code"}` whose
 * code is in `own`), relayed with its status, code and message, as a stream
 * relays it; undefined for any other body, which is never quoted.
 */
function ownAnswer(origin: string, status: number, body: unknown, own: ReadonlySet<unknown>, headers: { headers?: Record<string, string> }): UpstreamError | undefined {
  const fields = asFields(body);
  const message = fields['error'];
  if (!own.has(fields['code']) || typeof message !== 'string') return undefined;
  return relayed(origin, status, fields['code'] as string, message, headers);
}

/**
 * An error the remote sent for its caller, relayed with its status and code.
 * Its message and the UPSTREAM_HEADER say where it came from, so a remote's
 * 404 never reads as this router's own pattern miss.
 */
function relayed(origin: string, status: number, code: string, message: string, headers: { headers?: Record<string, string> }): UpstreamError {
  return new UpstreamError(status, code, `${relayedMessage(message)} (from the remote agent server at ${origin})`, {
    expose: true,
    headers: { ...headers.headers, [UPSTREAM_HEADER]: origin },
  });
}

/** A Retry-After in seconds is passed on; an HTTP date is not (the clocks may differ). */
function retryAfterHeader(retryAfter: string | null): { headers?: Record<string, string> } {
  return retryAfter !== null && /^\d{1,9}$/.test(retryAfter) ? { headers: { 'Retry-After': retryAfter } } : {};
}

/**
 * A relayed stream's end keeps the status our routers answer its code with, where that is not 502: a cancel or a
 * timeout there is not a broken hop (and a cancel is not worth a log line here).
 */
const STREAM_END_STATUS: ReadonlyMap<string, number> = new Map([
  ['cancelled', 409],
  ['replay_expired', 410],
  ...[...OWN_TIMEOUTS].map((code) => [code as string, 504] as const),
  ...[...OWN_UNAVAILABLE].map((code) => [code as string, 503] as const),
]);

/** An `event: error` frame: `{"error", "code"}` as our routers send it, or a JSON string as ai-query's Python server sends it. */
export function streamFailed(remote: string, origin: string, data: string): UpstreamError {
  let reply: unknown;
  try {
    reply = JSON.parse(data);
  } catch {
    // not JSON: do not relay text we cannot vouch for
  }
  const message = typeof reply === 'string' ? reply : asFields(reply)['error'];
  const code = relayedCode(asFields(reply)['code'], 'upstream_stream_error');
  if (typeof message === 'string') return relayed(origin, STREAM_END_STATUS.get(code) ?? 502, code, message, {});
  return new UpstreamError(502, code, `HTTPTransport: the stream from ${remote} failed`, { expose: true, publicMessage: "The remote agent's stream failed" });
}

/**
 * A remote's message as relayed to the caller and written to this router's
 * log: line breaks and other control characters become spaces, so the
 * remote cannot write log lines of its own here, and 500 characters at most.
 */
function relayedMessage(message: string): string {
  // Not cut between the two halves of a surrogate pair (an emoji).
  const last = message.charCodeAt(499);
  const end = message.length > 500 && last >= 0xd800 && last <= 0xdbff ? 499 : 500;
  return message.slice(0, end).replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]+/g, ' ');
}

function asFields(value: unknown): Record<string, unknown> {
  return typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : {};
}

function relayedCode(code: unknown, fallback: string): string {
  return typeof code === 'string' && CODE.test(code) ? code : fallback;
}
