import fc from 'fast-check';
import { anyBody, cancelBody, chatBody, envelopeBody, garbageBody, invokeBody, jsonBody } from './fuzz-json.ts';
import type { HttpCase, RawCase } from './fuzz-wire.ts';

/**
 * Random requests for the fuzz test: paths with percent-encodings and dot
 * segments, every method, lying and odd headers, bodies of every JSON shape
 * and garbage (sent with Node's client), and bytes Node's client refuses to
 * send (malformed request lines, content-length lies, truncated bodies,
 * bad chunking), written on raw sockets.
 */
export interface FuzzRequest {
  http?: HttpCase | undefined;
  raw?: RawCase | undefined;
  /** A deliberately failing agent, action or hook may be hit, so a 500 is allowed. */
  mayThrow: boolean;
  /** A HEAD request: answers carry no body. */
  head: boolean;
}

export const PREFIX = '/agents';
export const MAX_ID_LENGTH = 64;

/** Words that name a deliberately failing agent (boom-*), action (explode) or authorize outcome (crash). */
const THROWING = /boom|explode|crash/;

const printable = (max: number): fc.Arbitrary<string> => fc.string({ unit: 'grapheme-ascii', maxLength: max });

// ---- paths

const KNOWN_IDS = ['counter-1', 'counter-42', 'echo', 'slow-1', 'slow-2', 'boom-1', 'deny-me', 'nobody-1', 'caf%C3%A9', 'a%20b', 'counter-1x'];
const DOT_IDS = ['.', '..', '%2e', '%2E', '%2e%2e', '.%2E', '%2E.', '...', '%2e%2e%2f'];
const MALFORMED_IDS = ['%', '%%', '%zz', '%E0%A4%A', '%C3', 'a%2', '%00', '%0a', '%0D', '%7f', '%c2%80', '%2F', 'a%2fb', '%ff', '%ED%A0%80'];

/** Each character kept as is (when Node's client allows it in a path) or percent-encoded. */
const mixedEncoding = fc.array(fc.tuple(fc.string({ unit: 'grapheme', minLength: 1, maxLength: 1 }), fc.boolean()), { maxLength: 12 }).map((parts) =>
  parts.map(([char, keep]) => (keep && /^[\x21-\x7e]$/.test(char) && !'/?#%'.includes(char) ? char : encodeURIComponent(char))).join(''),
);

const agentSegment = fc.oneof(
  { weight: 16, arbitrary: fc.constantFrom(...KNOWN_IDS) },
  { weight: 3, arbitrary: fc.tuple(fc.constantFrom('id', 'slow'), fc.integer({ min: 0, max: 40 })).map(([kind, n]) => `${kind}-${n}`) },
  { weight: 2, arbitrary: mixedEncoding },
  { weight: 1, arbitrary: fc.uint8Array({ minLength: 1, maxLength: 6 }).map((bytes) => [...bytes].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('')) },
  { weight: 1, arbitrary: fc.constantFrom(...DOT_IDS) },
  { weight: 1, arbitrary: fc.constantFrom(...MALFORMED_IDS) },
  { weight: 1, arbitrary: fc.integer({ min: MAX_ID_LENGTH - 2, max: MAX_ID_LENGTH * 5 }).map((n) => 'x'.repeat(n)) },
  { weight: 1, arbitrary: fc.constant('') },
);

const ROUTES = ['/chat', '/chat', '/chat', '/invoke', '/invoke', '/state', '/state', '', '/', '/chat/', '/state/', '/invoke/', '/cancel', '/approvals', '/turns/t-1/events'];
const ODD_ROUTES = [
  '/unknown', '/chat/x', '//chat', '/CHAT', '/..', '/./state', '/%63hat', '/chat%2F', '/state/..', '/chat;x',
  '/cancel/x', '/turns/', '/turns//events', '/turns/%ZZ/events', '/turns/a%2Fb/events', '/turns/a/events/', '/turns/../events',
];
const route = fc.oneof({ weight: 6, arbitrary: fc.constantFrom(...ROUTES) }, { weight: 1, arbitrary: fc.constantFrom(...ODD_ROUTES) });

const PREFIXES = ['/agent', '', '/AGENTS', '/agents2', '/agents%2F', '/./agents', '/x/../agents'];
const prefix = fc.oneof({ weight: 12, arbitrary: fc.constant(PREFIX) }, { weight: 1, arbitrary: fc.constantFrom(...PREFIXES) });

const QUERIES = ['', '', '', '?when_busy=reject', '?when_busy=interrupt', '?when_busy=nope', '?on_disconnect=continue', '?on_disconnect=x', '?last_event_id=x:1', '?stream=true&when_busy=reject', '?stream=true', '?stream=1', '?stream=YES', '?stream=events', '?stream=ui', '?stream=UI', '?stream=false', '?stream=maybe', '?stream=%ZZ', '?stream', '?a=1&stream=on', '?stream=on&stream=off', '?stream=tr%75e', '?&&=', '?stream=true#frag'];
// Not fc.webQueryParameters(): building it retains an 80 MiB table, which would swamp the heap measurement.
const randomQuery = fc.array(fc.tuple(mixedEncoding, mixedEncoding), { maxLength: 3 }).map((pairs) => `?${pairs.map(([k, v]) => `${k}=${v}`).join('&')}`);
const query = fc.oneof({ weight: 6, arbitrary: fc.constantFrom(...QUERIES) }, { weight: 1, arbitrary: randomQuery });

const pathParts = fc.tuple(prefix, agentSegment, route, query);
const path = pathParts.map(([p, id, r, q]) => `${p}/${id}${r}${q}`);

/** Mostly the body the route takes, so most requests get past the 400s. */
function bodyFor(r: string): fc.Arbitrary<Buffer | undefined> {
  const matching = r.startsWith('/chat') ? chatBody : r.startsWith('/invoke') ? invokeBody : r === '' || r === '/' ? envelopeBody : r === '/cancel' ? cancelBody : undefined;
  if (matching === undefined) return anyBody;
  return fc.oneof({ weight: 3, arbitrary: matching.map((text) => Buffer.from(text)) }, { weight: 1, arbitrary: anyBody });
}

// ---- headers

/** Header values Node's client accepts: no CR, LF or other controls. */
const headerText = printable(30).filter((value) => /^[\t\x20-\x7e]*$/.test(value));

const JSON_TYPES = ['application/json', 'application/json', 'application/json; charset=utf-8', 'Application/JSON', 'application/vnd.api+json', 'application/json;'];
const OTHER_TYPES = ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', ';', '*/*', 'json'];
const ACCEPTS = ['text/event-stream', 'text/event-stream; charset=utf-8', 'TEXT/EVENT-STREAM', '*/*', 'application/json', 'text/event-stream, application/json', ''];
const AUTHS = ['allow', 'allow', 'allow', 'deny', '401', '403', 'crash', 'async-deny'];
const ORIGINS = ['https://ok.example', 'https://evil.example', 'null'];

const headers = fc
  .record({
    contentType: fc.option(
      fc.oneof({ weight: 12, arbitrary: fc.constantFrom(...JSON_TYPES) }, { weight: 2, arbitrary: fc.constantFrom(...OTHER_TYPES) }, { weight: 1, arbitrary: headerText }),
      { freq: 5 },
    ),
    accept: fc.option(fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...ACCEPTS) }, { weight: 1, arbitrary: headerText }), { freq: 2 }),
    auth: fc.option(fc.constantFrom(...AUTHS), { freq: 3 }),
    origin: fc.option(fc.constantFrom(...ORIGINS), { freq: 1 }),
    preflight: fc.option(fc.constantFrom('POST', 'GET', 'DELETE'), { freq: 1 }),
    extra: fc.option(fc.tuple(fc.stringMatching(/^x-[a-z0-9-]{1,12}$/), headerText), { freq: 1 }),
  })
  .map((h) => {
    const out: Record<string, string> = {};
    if (h.contentType !== null) out['content-type'] = h.contentType;
    if (h.accept !== null) out['accept'] = h.accept;
    if (h.auth !== null) out['x-auth'] = h.auth;
    if (h.origin !== null) out['origin'] = h.origin;
    if (h.preflight !== null) out['access-control-request-method'] = h.preflight;
    if (h.extra !== null) out[h.extra[0]] = h.extra[1];
    return out;
  });

const METHOD_NAMES = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS'];

const httpCase: fc.Arbitrary<HttpCase> = pathParts.chain(([p, id, r, q]) =>
  fc
    .record({ headers, body: bodyFor(r), pick: fc.nat(99), other: fc.constantFrom(...METHOD_NAMES), cut: fc.nat(99) })
    .map(({ headers: h, body: b, pick, other, cut }) => {
      // Mostly the method the route wants, so most requests get past the 405.
      const wanted = r.startsWith('/state') || r.startsWith('/turns') || (r === '/approvals' && pick % 2 === 0) ? 'GET' : 'POST';
      const method = pick < 85 ? wanted : other;
      const withBody = method === 'GET' || method === 'HEAD' ? pick >= 95 : true;
      return { method, path: `${p}/${id}${r}${q}`, headers: h, body: withBody ? b : undefined, cutAfterHeaders: cut < 4 };
    }),
);

// ---- raw bytes

const RAW_METHODS = ['POST', 'GET', 'get', 'FOO', 'PRI', 'HEAD', 'POST ', 'P\u0000ST', 'OPTIONS'];
const VERSIONS = ['HTTP/1.1', 'HTTP/1.1', 'HTTP/1.1', 'HTTP/1.0', 'HTTP/2.0', 'HTTP/0.9', 'HTTP/1.2', 'http/1.1', '', 'HTTP/1.1 extra'];
const RAW_PATHS = ['/agents/echo/chat', '/agents/a b/chat', '/agents/a\tb/state', '/agents/\u0001/state', 'http://127.0.0.1/agents/echo/state', '*', 'agents/echo/state', '/agents/%/chat', '/agents/caf\u00e9/state', '/agents/echo/chat\u0000'];

interface RawParts {
  method: string;
  target: string;
  version: string;
  headerLines: string[];
  body: string;
  lengthMode: 'exact' | 'short' | 'long' | 'none' | 'junk' | 'double' | 'chunked' | 'chunked-bad' | 'both';
}

const rawHeaderLine = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom('Content-Type: application/json', 'Accept: text/event-stream', 'X-Auth: deny', 'X-Auth: crash', 'Connection: close', 'Expect: 100-continue') },
  { weight: 1, arbitrary: fc.constantFrom('NoColonHere', ' folded: continuation', 'Bad Name: x', 'X-Nul: a\u0000b', 'X-Bare-CR: a\rb', 'Content-Type: application/json\u00ff', 'Upgrade: websocket', 'Expect: nothing-known') },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 20 }).map((k) => `X-Big: ${'y'.repeat(k * 1024)}`) },
  { weight: 1, arbitrary: printable(20).map((text) => `X-Random: ${text}`) },
);

const rawParts: fc.Arbitrary<RawParts> = fc.record({
  method: fc.oneof({ weight: 4, arbitrary: fc.constant('POST') }, { weight: 1, arbitrary: fc.constantFrom(...RAW_METHODS) }),
  target: fc.oneof({ weight: 3, arbitrary: path }, { weight: 1, arbitrary: fc.constantFrom(...RAW_PATHS) }),
  version: fc.oneof({ weight: 6, arbitrary: fc.constant('HTTP/1.1') }, { weight: 1, arbitrary: fc.constantFrom(...VERSIONS) }),
  headerLines: fc.array(rawHeaderLine, { maxLength: 4 }),
  body: fc.oneof({ weight: 3, arbitrary: jsonBody }, { weight: 1, arbitrary: garbageBody }),
  lengthMode: fc.constantFrom('exact', 'exact', 'exact', 'short', 'long', 'none', 'junk', 'double', 'chunked', 'chunked-bad', 'both'),
});

function rawRequest(parts: RawParts, withHost: boolean): RawCase {
  const body = Buffer.from(parts.body);
  const lines = [`${parts.method} ${parts.target} ${parts.version}`.trimEnd()];
  if (withHost) lines.push('Host: localhost');
  lines.push(...parts.headerLines);
  let payload: Buffer = body;
  let finAfter: RawCase['finAfter'] = 'answer';
  switch (parts.lengthMode) {
    case 'exact':
      lines.push(`Content-Length: ${body.length}`);
      break;
    case 'short': // the rest of the body is read as the next request
      lines.push(`Content-Length: ${Math.max(0, body.length - 3)}`);
      break;
    case 'long': // a truncated body: the client hangs up before sending it all
      lines.push(`Content-Length: ${body.length + 10}`);
      finAfter = 'write';
      break;
    case 'none':
      break;
    case 'junk':
      lines.push('Content-Length: 12abc');
      break;
    case 'double':
      lines.push(`Content-Length: ${body.length}`, `Content-Length: ${body.length + 1}`);
      break;
    case 'chunked':
      lines.push('Transfer-Encoding: chunked');
      payload = Buffer.concat([Buffer.from(`${body.length.toString(16)}\r\n`), body, Buffer.from('\r\n0\r\n\r\n')]);
      break;
    case 'chunked-bad':
      lines.push('Transfer-Encoding: chunked');
      payload = Buffer.concat([Buffer.from('zz\r\n'), body]);
      finAfter = 'write';
      break;
    case 'both': // request smuggling shape: both framings
      lines.push('Transfer-Encoding: chunked', `Content-Length: ${body.length}`);
      payload = Buffer.concat([Buffer.from(`${body.length.toString(16)}\r\n`), body, Buffer.from('\r\n0\r\n\r\n')]);
      break;
  }
  // Anything odd in the request line or headers may leave Node's parser waiting: end the connection.
  const odd = parts.version !== 'HTTP/1.1' || parts.method !== 'POST' || !parts.target.startsWith('/') || parts.headerLines.some((line) => !/^[A-Za-z-]+: [\x20-\x7e]*$/.test(line));
  if (odd) finAfter = 'write';
  const head = Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1');
  return { bytes: Buffer.concat([head, payload]), head: parts.method === 'HEAD', finAfter };
}

const rawCase: fc.Arbitrary<RawCase> = fc.oneof(
  { weight: 8, arbitrary: fc.tuple(rawParts, fc.nat(19)).map(([parts, n]) => rawRequest(parts, n !== 0)) },
  // Garbage, and a valid request cut anywhere: the server must cope with the end of the connection.
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 200 }).map((bytes) => ({ bytes: Buffer.from(bytes), head: false, finAfter: 'write' as const })) },
  {
    weight: 2,
    arbitrary: fc.tuple(rawParts, fc.nat()).map(([parts, cut]) => {
      const whole = rawRequest({ ...parts, lengthMode: 'exact' }, true);
      return { bytes: whole.bytes.subarray(0, cut % whole.bytes.length), head: whole.head, finAfter: 'write' as const };
    }),
  },
  // Two requests in one write (pipelining); not HEAD, whose answers would need telling apart.
  {
    weight: 1,
    arbitrary: fc.tuple(rawParts, rawParts).map(([a, b]) => {
      const first = rawRequest({ ...a, method: 'POST', lengthMode: 'exact' }, true);
      const second = rawRequest({ ...b, method: 'POST', lengthMode: 'exact' }, true);
      return { bytes: Buffer.concat([first.bytes, second.bytes]), head: false, finAfter: first.finAfter === 'write' || second.finAfter === 'write' ? ('write' as const) : ('answer' as const) };
    }),
  },
);

export const fuzzRequest: fc.Arbitrary<FuzzRequest> = fc.oneof(
  {
    weight: 17,
    arbitrary: httpCase.map((c) => described({ http: c, mayThrow: mayThrow(c), head: c.method === 'HEAD' })),
  },
  {
    weight: 3,
    arbitrary: rawCase.map((c) => described({ raw: c, mayThrow: THROWING.test(c.bytes.toString('latin1')), head: c.head })),
  },
);

/** Read off the whole request: describeHttp cuts the body at 300 characters, and an `explode` past that still throws. */
function mayThrow(c: HttpCase): boolean {
  return THROWING.test(`${c.path} ${JSON.stringify(c.headers)} ${c.body?.toString('utf8') ?? ''}`);
}

/** fast-check prints a counterexample through this: the request as read, not as a dump of Buffers. */
function described(request: FuzzRequest): FuzzRequest {
  return Object.defineProperty(request, fc.toStringMethod, { value: () => describeRequest(request), enumerable: false });
}

export function describeHttp(c: HttpCase): string {
  const body = c.body === undefined ? '' : ` body=${JSON.stringify(c.body.toString('utf8').slice(0, 300))}${c.body.length > 300 ? `... (${c.body.length} bytes)` : ''}`;
  return `${c.method} ${c.path} headers=${JSON.stringify(c.headers)}${body}${c.cutAfterHeaders ? ' (client hangs up after the headers)' : ''}`;
}

export function describeRequest(request: FuzzRequest): string {
  if (request.http !== undefined) return describeHttp(request.http);
  const raw = request.raw as RawCase;
  const text = raw.bytes.toString('latin1');
  return `raw(${raw.finAfter}) ${JSON.stringify(text.length > 400 ? `${text.slice(0, 400)}... (${text.length} bytes)` : text)}`;
}
