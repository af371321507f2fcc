import type { IncomingMessage, ServerResponse } from 'node:http';
import { sendJson } from './respond.ts';

/**
 * Answers 400 and returns true for an HTTP/1 request with more than one
 * Host header line, or one naming several hosts (`a, b`): RFC 9112 (3.2)
 * has the server refuse it, and Node would keep the first, which a proxy
 * in front may not have read. The connection closes after the answer.
 */
export function refuseRepeatedHost(req: IncomingMessage, res: ServerResponse): boolean {
  if (req.httpVersionMajor !== 1) return false;
  const host = req.headers.host;
  if (host === undefined) return false;
  let repeated = host.includes(',');
  if (!repeated) {
    const raw = req.rawHeaders;
    let seen = 0;
    for (let i = 0; i < raw.length && seen < 2; i += 2) {
      const name = raw[i] as string;
      if (name.length === 4 && name.toLowerCase() === 'host') seen++;
    }
    repeated = seen > 1;
  }
  if (!repeated) return false;
  sendJson(res, 400, { error: 'A request must carry exactly one Host header, naming one host', code: 'bad_host' }, { Connection: 'close' });
  return true;
}

/**
 * The host an absolute-form target names (`GET http://h:1/x` -> `h:1`),
 * which a server uses instead of the Host header (RFC 9112, 3.2.2); undefined
 * for the usual origin form (`/x`).
 */
export function targetHost(target: string | undefined): string | undefined {
  if (target === undefined || target.charCodeAt(0) === 47 /* / */) return undefined;
  const authority = /^[a-z][a-z0-9+.-]*:\/\/([^/?#]*)/i.exec(target)?.[1];
  // Userinfo (`user@host`) is no part of the host; an http URI should carry none (RFC 9110, 4.2.4).
  return authority === undefined ? undefined : authority.slice(authority.lastIndexOf('@') + 1);
}
