/**
 * Why Node's fetch made no TLS connection, for HTTPTransport and the model
 * adapters alike. The server was reached and is up, so "check that it is up"
 * would send the operator the wrong way, and retrying gets the same refusal:
 * a certificate does not become trusted on a second try.
 */

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

/**
 * The fix for a failure `code` (the system's or Node's, from the fetch
 * error's cause) that means no TLS connection could be made, or undefined
 * when it means something else. `url` names the setting to change, as the
 * operator wrote it (`url`, `baseURL`).
 */
export function noTlsFix(code: string | undefined, url: string): string | undefined {
  // OpenSSL's answer to a plain HTTP reply where a TLS handshake was expected.
  if (code === 'ERR_SSL_WRONG_VERSION_NUMBER') return `that port does not speak TLS: use an http: ${url}, or the port that serves https`;
  if (code === undefined || !REFUSED_CERTIFICATE.has(code)) return undefined;
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID' || code === 'HOSTNAME_MISMATCH') {
    return `its certificate does not name the host in the ${url}: use a ${url} with a host name the certificate holds`;
  }
  return "its certificate is not trusted here: add its CA with NODE_EXTRA_CA_CERTS (a private CA's, such as a corporate proxy's or a local gateway's), or renew it if it expired";
}
