/**
 * What a failed fetch, or a failed read of its body, says went wrong, for
 * HTTPTransport and the model adapters alike: each turns the kind into its
 * own error, with its own wording and codes.
 */

/**
 * - `fetch_timeout`: Node's fetch (undici) gave up by itself, 300 s without response headers or between two body reads.
 * - `not_http`: the server answered with bytes that are not HTTP/1.1 (llhttp's `HPE_` codes, or its `HTTPParserError`: another protocol on that port).
 * - `headers_overflow`: it answered with more header bytes than Node's fetch reads (16 KiB by default).
 * - `connection_broken`: a connection that was open broke off: the request may have reached the server.
 * - `undecodable`: the body does not decode as its Content-Encoding says.
 * - `no_tls`: no TLS connection could be made (see `noTlsFix`).
 * - `other`: none of these (a refused connection, an unknown host, ...).
 */
export type FetchFailureKind = 'fetch_timeout' | 'not_http' | 'headers_overflow' | 'connection_broken' | 'undecodable' | 'no_tls' | 'other';

/** The kind, and the system's or undici's code (from the error or its cause) that told it. */
export type FetchFailure = { kind: Exclude<FetchFailureKind, 'other'>; code: string } | { kind: 'other'; code: string | undefined };

/** Sorts a fetch failure by its code (see FetchFailureKind). */
export function fetchFailure(error: unknown): FetchFailure {
  const code = failureCode(error);
  if (code !== undefined) return { kind: kindOf(code, error), code };
  // Node 24 and later: fetch throws llhttp's error without its HPE_ code.
  if (failureOf(error)?.name === 'HTTPParserError') return { kind: 'not_http', code: 'HTTPParserError' };
  return { kind: 'other', code };
}

function kindOf(code: string, error: unknown): FetchFailureKind {
  if (FETCH_TIMEOUTS.has(code)) return 'fetch_timeout';
  if (code.startsWith('HPE_')) return 'not_http';
  if (code === 'UND_ERR_HEADERS_OVERFLOW') return 'headers_overflow';
  if (BROKEN_CONNECTION.has(code) && !beforeConnected(error)) return 'connection_broken';
  if (code === 'Z_DATA_ERROR' || code.startsWith('ERR__ERROR_FORMAT_')) return 'undecodable';
  return code === WRONG_VERSION || REFUSED_CERTIFICATE.has(code) ? 'no_tls' : 'other';
}

/** Node's fetch's own limits: undici's headersTimeout and bodyTimeout. */
const FETCH_TIMEOUTS: ReadonlySet<string> = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT']);
/** A connection that was open and then closed. */
const BROKEN_CONNECTION: ReadonlySet<string> = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE']);

interface FailureDetail {
  name?: unknown;
  code?: unknown;
  syscall?: unknown;
  message?: unknown;
}

/**
 * What failed under a fetch or a read: the error itself when it carries a
 * code (undici's `UND_ERR_*`), else its cause (fetch's TypeError wraps the
 * system's `ECONNREFUSED` and the like).
 */
function failureOf(error: unknown): FailureDetail | undefined {
  const outer = error as (FailureDetail & { cause?: unknown }) | undefined;
  return outer?.code !== undefined ? outer : (outer?.cause as FailureDetail | undefined);
}

function failureCode(error: unknown): string | undefined {
  const code = failureOf(error)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** A reset while connecting or during the TLS handshake: nothing was sent yet. */
function beforeConnected(error: unknown): boolean {
  const failure = failureOf(error);
  return failure?.syscall === 'connect' || (typeof failure?.message === 'string' && failure.message.includes('before secure TLS connection'));
}

/**
 * What Node's TLS makes of a server certificate this process does not trust:
 * a self-signed one, one from a private CA (a corporate proxy's, a local
 * gateway's), an expired one, or one that does not name the url's host (an
 * https url holding an IP address).
 */
const REFUSED_CERTIFICATE: ReadonlySet<string> = new Set([
  'DEPTH_ZERO_SELF_SIGNED_CERT', 'SELF_SIGNED_CERT_IN_CHAIN', 'UNABLE_TO_GET_ISSUER_CERT', 'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID', 'CERT_UNTRUSTED', 'CERT_REJECTED', 'CERT_REVOKED',
  'INVALID_CA', 'HOSTNAME_MISMATCH', 'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/** OpenSSL's answer to a plain HTTP reply where a TLS handshake was expected. */
const WRONG_VERSION = 'ERR_SSL_WRONG_VERSION_NUMBER';

/**
 * The fix for a `no_tls` failure's code: the server is up, and a retry gets the same refusal.
 * `url` names the setting to change, as the operator wrote it (`url`, `baseURL`).
 */
export function noTlsFix(code: string, url: string): string {
  if (code === WRONG_VERSION) return `that port does not speak TLS: use an http: ${url}, or the port that serves https`;
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID' || code === 'HOSTNAME_MISMATCH') {
    return `its certificate does not name the host in the ${url}: use a ${url} with a host name the certificate holds`;
  }
  return "its certificate is not trusted here: add its CA with NODE_EXTRA_CA_CERTS (a private CA's, such as a corporate proxy's or a local gateway's), or renew it if it expired";
}
