import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { awaitingContinue } from './body.ts';

/**
 * How long, and how much, a closing connection's unread upload is read and
 * dropped after its answer: the same bounds as after a 413 on a kept-alive
 * connection (body.ts).
 */
const LINGER_MS = 2000;
const LINGER_BYTES = 16 * 1024 * 1024;

/**
 * A connection that closes after its answer (HTTP/1.0, `Connection: close`:
 * what nginx sends upstream by default, `proxy_http_version 1.0`) is closed
 * by Node as soon as the answer is written. When the request's body was not
 * read by then (a 404, 413, 415 or 403 given from its headers), the bytes
 * still arriving make the kernel reset the connection, and a client still
 * writing them fails on the reset, often before it read the answer: nginx
 * then answers its own 502 page instead of the JSON one. Instead, once the
 * answer is out our side is shut (FIN: the answer is complete) and what the
 * client still sends is read and dropped until the body ends or the client
 * closes, for up to 2 s or 16 MiB (a lingering close, as nginx does itself),
 * then the socket is closed. Node closes through `socket.destroySoon()` (it checks the
 * method is there): that call is what waits. Call it once the request
 * arrives, before anything is answered; a request read whole closes at once.
 */
export function lingerOnClose(req: IncomingMessage, res: ServerResponse): void {
  // Kept alive: Node reads an unread body before the next request. HTTP/2 resets the one stream.
  if (res.shouldKeepAlive || req.httpVersionMajor !== 1 || req.complete) return;
  const socket = req.socket as Socket;
  const destroySoon = socket.destroySoon;
  // Another request on this socket set it already (pipelined), or a socket that is no net.Socket.
  if (typeof destroySoon !== 'function' || Object.hasOwn(socket, 'destroySoon')) return;
  socket.destroySoon = (): void => {
    // Its own property gone, the prototype's method is the socket's again.
    Reflect.deleteProperty(socket, 'destroySoon');
    // A client holding its body back for `100 Continue` sends none: nothing to wait for.
    if (req.complete || req.destroyed || awaitingContinue(req)) return destroySoon.call(socket);
    linger(socket, req);
  };
}

function linger(socket: Socket, req: IncomingMessage): void {
  socket.end();
  let left = LINGER_BYTES;
  const close = (): void => void socket.destroy();
  const timer = setTimeout(close, LINGER_MS);
  timer.unref();
  socket.once('close', () => clearTimeout(timer));
  // The body's end: nothing more is due (and nothing read after it may start a request).
  req.once('end', close);
  socket.once('end', close);
  // Counted on the request, not the socket: a 'data' listener on the socket would take it from
  // Node's parser, which reads it directly, and leave it stopped.
  req.on('data', (chunk: Buffer) => {
    left -= chunk.length;
    if (left < 0) close();
  });
  // Node stopped reading while the body went unread (its buffer full): read on.
  req.resume();
}
