import type { IncomingMessage, ServerResponse } from 'node:http';
import { describeValue } from '../errors.ts';
import { checkKnownOptions, checkOption } from '../options.ts';

/**
 * Cross-origin access for browsers; off unless given. A list of origins or
 * `'*'` alone is shorthand for `{ origins: ... }`, as the config file's `cors_origins` takes it.
 * @example cors: ['http://localhost:3000']
 */
export type CorsOptions = CorsPolicy | readonly string[] | '*';

/** The cors option written out. */
export interface CorsPolicy {
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

/** One header name (an HTTP token), or several separated by commas. */
const HEADER_NAMES = /^[\w!#$%&'*+.^`|~-]+(?:[ \t]*,[ \t]*[\w!#$%&'*+.^`|~-]+)*$/;

/** Every key of CorsOptions, so a misspelt one (`origin`, the cors package's name) is refused, not dropped. */
const CORS_KEYS: { readonly [K in keyof Required<CorsPolicy>]: true } = { origins: true, allowHeaders: true, credentials: true, maxAge: true };

const ANY_ORIGIN: CorsPolicy = { origins: '*' };
// One policy per shorthand list, made once: applyCors runs on every request.
const policies = new WeakMap<readonly string[], CorsPolicy>();

function policyOf(cors: CorsOptions): CorsPolicy {
  if (cors === '*') return ANY_ORIGIN;
  if (!Array.isArray(cors)) return cors as CorsPolicy;
  let policy = policies.get(cors);
  if (policy === undefined) policies.set(cors, (policy = { origins: cors }));
  return policy;
}


/**
 * Checks the cors option when the router is made, so a mistake in it is a
 * TypeError there rather than a CORS policy other than the one meant. Refuses
 * `origins: '*'` with `credentials: true`: browsers refuse a literal `*` with
 * credentials, so honouring it means echoing every origin, and any website
 * could then send its visitors' cookies and read the answers. Refuses a
 * string other than `'*'`: matched with `includes`, it would allow every
 * origin that is part of it (`https://app.example.co` for
 * `'https://app.example.com'`). And refuses a listed origin no browser sends
 * (a path or trailing slash, a default port, capitals), which would never match.
 */
export function checkCors(options: CorsOptions, where: string): void {
  const cors = policyOf(options);
  checkKnownOptions(cors, CORS_KEYS, `${where}: cors`);
  // Unknown: from plain JavaScript (or a config file) it may be anything, a string above all (the cors package's habit).
  const origins: unknown = cors.origins;
  if (typeof origins === 'string' && origins !== '*') {
    throw new TypeError(`${where}: cors origins must be '*', a list or a function; for one origin pass a list: { origins: [${JSON.stringify(origins.slice(0, 100))}] }`);
  }
  if (origins !== '*' && typeof origins !== 'function' && !(Array.isArray(origins) && origins.every((origin) => typeof origin === 'string'))) {
    throw new TypeError(`${where}: cors origins must be '*', a list of origins such as ['https://app.example.com'], or a function (origin) => boolean; got ${describeValue(origins)}`);
  }
  if (Array.isArray(origins)) {
    for (const origin of origins) {
      if (origin === '*') throw new TypeError(`${where}: cors origins: for any origin pass '*' itself, not in a list: { origins: '*' }`);
      const sent = originAsSent(origin);
      if (sent !== origin) {
        throw new TypeError(`${where}: cors origin ${JSON.stringify(origin.slice(0, 100))} is not one a browser sends${sent === undefined ? ' (scheme://host[:port], nothing after it)' : `; it sends ${JSON.stringify(sent)}`}`);
      }
    }
  }
  if (cors.credentials !== undefined) checkOption(cors.credentials, 'boolean', `${where}: cors credentials`);
  if (cors.maxAge !== undefined) checkOption(cors.maxAge, 'count', `${where}: cors maxAge`);
  if (cors.allowHeaders !== undefined) {
    checkOption(cors.allowHeaders, 'strings', `${where}: cors allowHeaders`);
    // A line break (a list split from a CRLF file) made every preflight a 500; a space, one no browser takes.
    for (const name of cors.allowHeaders) {
      if (!HEADER_NAMES.test(name)) throw new TypeError(`${where}: cors allowHeaders ${JSON.stringify(name.slice(0, 100))} is not a header name (letters, digits and !#$%&'*+-.^_\`|~), e.g. ['content-type', 'authorization']`);
    }
  }
  if (cors.origins === '*' && cors.credentials === true) {
    throw new TypeError(`${where}: cors origins '*' with credentials: true would let any website send its visitors' cookies and read the answers; list the origins (['https://app.example.com']) or pass a function that checks them`);
  }
  // Any website can send Origin: null, from a sandboxed iframe of its own: with credentials, that is '*' with credentials.
  if (Array.isArray(origins) && origins.includes('null') && cors.credentials === true) {
    throw new TypeError(`${where}: cors origin 'null' with credentials: true would let any website send its visitors' cookies and read the answers (a sandboxed iframe of any page sends Origin: null); leave 'null' out, or credentials`);
  }
}

/**
 * The `Origin` header a browser would send for a page at `origin`, or
 * undefined when it names no origin: scheme and host in lower case, no
 * default port, no path (not even `/`). `null` (a sandboxed frame, a file: page) stays as it is.
 */
function originAsSent(origin: string): string | undefined {
  if (origin === 'null') return origin;
  if (!/^[a-z][a-z0-9+.-]*:\/\/[^/?#]/i.test(origin)) return undefined;
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    return undefined;
  }
  // URL gives other schemes (chrome-extension:, say) the origin "null"; their Origin header is scheme://host.
  return url.origin === 'null' ? `${url.protocol}//${url.host}` : url.origin;
}

/**
 * Adds `value` to a list header (`Vary`, `Access-Control-Expose-Headers`),
 * keeping what a host set there (`Accept-Language`, `X-Request-Id`, say);
 * nothing when the list already holds one of `covered`.
 */
/** The router's own response headers a page on an allowed origin may read. */
const EXPOSED = ['Retry-After', 'Turn-Id', 'X-Request-Id', 'Agent-Router-Upstream'];

function addToList(res: ServerResponse, header: string, value: string, covered: readonly string[]): void {
  const current = res.getHeader(header);
  if (current === undefined) return void res.setHeader(header, value);
  const list = Array.isArray(current) ? current.join(', ') : String(current);
  if (list.split(',').some((name) => covered.includes(name.trim().toLowerCase()))) return;
  res.setHeader(header, `${list}, ${value}`);
}

function allowed(cors: CorsPolicy, origin: string): boolean {
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
export function applyCors(options: CorsOptions, req: IncomingMessage, res: ServerResponse, method: string): boolean {
  const cors = policyOf(options);
  const origin = req.headers.origin;
  addToList(res, 'Vary', 'Origin', ['origin', '*']);
  const ok = origin !== undefined && allowed(cors, origin);
  if (ok) {
    res.setHeader('Access-Control-Allow-Origin', origin);
    if (cors.credentials === true) res.setHeader('Access-Control-Allow-Credentials', 'true');
  }
  if (req.method !== 'OPTIONS' || req.headers['access-control-request-method'] === undefined) {
    // None of these is CORS-safelisted: without this a page sees a 429 but not how long to wait
    // (Chromium's res.headers.get('retry-after') is null), nor which turn or request it was, nor which remote refused.
    if (ok) for (const name of EXPOSED) addToList(res, 'Access-Control-Expose-Headers', name, [name.toLowerCase()]);
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
