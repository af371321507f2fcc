import type { IncomingMessage, ServerResponse } from 'node:http';

/** Cross-origin access for browsers; off unless given. */
export interface CorsOptions {
  /** Allowed origins: a list (`https://app.example.com`), `'*'` for any, or a predicate. */
  origins: readonly string[] | '*' | ((origin: string) => boolean);
  /** Request headers a browser may send. @defaultValue content-type, authorization, accept, last-event-id, x-request-id */
  allowHeaders?: readonly string[] | undefined;
  /** Let browsers send cookies and HTTP auth (the origin is echoed, never `*`). @defaultValue false */
  credentials?: boolean | undefined;
  /** Seconds a browser may cache a preflight answer. @defaultValue 600 */
  maxAge?: number | undefined;
}

/** What a chat page sends: its JSON, a token, the stream's Accept, and the request id a remote hop carries on (see payload.ts). */
const DEFAULT_HEADERS = 'content-type, authorization, accept, last-event-id, x-request-id';

/**
 * Refuses `origins: '*'` with `credentials: true`. Browsers refuse a literal
 * `*` with credentials, so honouring it means echoing every origin: any
 * website could then send its visitors' cookies and read the answers.
 */
export function checkCors(cors: CorsOptions, where: string): void {
  if (cors.origins === '*' && cors.credentials === true) {
    throw new TypeError(`${where}: cors origins '*' with credentials: true would let any website send its visitors' cookies and read the answers; list the origins (['https://app.example.com']) or pass a function that checks them`);
  }
}

/**
 * Adds `value` to a list header (`Vary`, `Access-Control-Expose-Headers`),
 * keeping what a host set there (`Accept-Language`, `X-Request-Id`, say);
 * nothing when the list already holds one of `covered`.
 */
function addToList(res: ServerResponse, header: string, value: string, covered: readonly string[]): void {
  const current = res.getHeader(header);
  if (current === undefined) return void res.setHeader(header, value);
  const list = Array.isArray(current) ? current.join(', ') : String(current);
  if (list.split(',').some((name) => covered.includes(name.trim().toLowerCase()))) return;
  res.setHeader(header, `${list}, ${value}`);
}

function allowed(cors: CorsOptions, origin: string): boolean {
  if (cors.origins === '*') return true;
  if (typeof cors.origins === 'function') return cors.origins(origin);
  return cors.origins.includes(origin);
}

/**
 * Sets the CORS response headers for an allowed origin (echoed, with
 * `Vary: Origin`, so caches keep answers per origin apart, and `Retry-After`
 * exposed to the page). Returns true when the request was a preflight, which
 * it has then answered.
 */
export function applyCors(cors: CorsOptions, req: IncomingMessage, res: ServerResponse, method: string): boolean {
  const origin = req.headers.origin;
  addToList(res, 'Vary', 'Origin', ['origin', '*']);
  const ok = origin !== undefined && allowed(cors, origin);
  if (ok) {
    res.setHeader('Access-Control-Allow-Origin', origin);
    if (cors.credentials === true) res.setHeader('Access-Control-Allow-Credentials', 'true');
  }
  if (req.method !== 'OPTIONS' || req.headers['access-control-request-method'] === undefined) {
    // Retry-After (on 429 and 503) is not a CORS-safelisted response header: without this, a page
    // sees the status but not how long to wait (Chromium's res.headers.get('retry-after') is null).
    if (ok) addToList(res, 'Access-Control-Expose-Headers', 'Retry-After', ['retry-after']);
    return false;
  }
  if (ok) {
    res.setHeader('Access-Control-Allow-Methods', `${method}, OPTIONS`);
    res.setHeader('Access-Control-Allow-Headers', cors.allowHeaders?.join(', ') ?? DEFAULT_HEADERS);
    res.setHeader('Access-Control-Max-Age', String(cors.maxAge ?? 600));
  }
  // A refused origin gets no CORS headers, and the browser blocks the call.
  res.statusCode = 204;
  res.end();
  return true;
}
