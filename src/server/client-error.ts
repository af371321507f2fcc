import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import { sendJson } from '../http/respond.ts';
import type { Duplex } from 'node:stream';

/**
 * Answers what Node's HTTP parser refuses (malformed requests, headers too
 * large, a request that took too long to arrive) in the library's JSON error
 * shape instead of Node's bare status line. Mirrors Node's own rule: answer
 * only if nothing was written on the socket yet, then close it.
 */
export function answerClientError(error: Error & { code?: string }, socket: Duplex & { bytesWritten?: number }): void {
  if (error.code === 'ECONNRESET' || !socket.writable || (socket.bytesWritten ?? 0) > 0) {
    socket.destroy();
    return;
  }
  const [status, code, message] =
    error.code === 'HPE_HEADER_OVERFLOW' ? [431, 'headers_too_large', 'Request headers are too large']
    : error.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? [408, 'request_timeout', 'The request did not arrive in time']
    : [400, 'bad_request', 'Malformed HTTP request'];
  const body = JSON.stringify({ error: message, code });
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

/**
 * Node's `checkExpectation`: an `Expect` other than `100-continue`, which
 * Node would answer with a bare 417. The body may follow, so the connection
 * is closed after the answer.
 */
export function answerExpectation(req: IncomingMessage, res: ServerResponse): void {
  const expect = String(req.headers.expect).slice(0, 64);
  sendJson(res, 417, { error: `Expect ${JSON.stringify(expect)} is not supported; only 100-continue is`, code: 'expectation_failed' }, { Connection: 'close' });
}

/**
 * Node's `connect`: a CONNECT request, which Node would answer by closing
 * the socket without a word. This server is no proxy; the client gets the
 * JSON 405 any other method the routes do not take gets.
 */
export function answerConnect(_req: IncomingMessage, socket: Duplex): void {
  // The socket is ours now, outside Node's timeouts: read and drop what follows (a tunnel's TLS hello) so closing does
  // not reset the answer away, and destroy it after 2 s (an idle timeout would be reset by a trickling client).
  const cut = setTimeout(() => socket.destroy(), 2000);
  socket.on('close', () => clearTimeout(cut));
  socket.on('error', () => socket.destroy());
  socket.resume();
  const body = JSON.stringify({ error: 'Method not allowed; CONNECT is not supported (this is not a proxy)', code: 'method_not_allowed' });
  socket.end(
    `HTTP/1.1 405 ${STATUS_CODES[405]}\r\nAllow: GET, HEAD, POST, OPTIONS\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}
