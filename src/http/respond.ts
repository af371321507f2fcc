import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { errorBody, statusOf, AgentRouterError } from '../errors.ts';

/** Writes a JSON response with its length; the one place JSON answers are made. */
export function sendJson(res: ServerResponse, status: number, body: unknown, headers?: Readonly<Record<string, string>>): void {
  if (res.headersSent || res.destroyed) return;
  const payload = JSON.stringify(body);
  const length = Buffer.byteLength(payload);
  // writeHead with an object skips setHeader's per-call work; headers set earlier (CORS) are merged in.
  res.writeHead(status, withHeaders({ 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': length }, headers));
  // A string, not a Buffer: Node 20 puts a Buffer body's head in front of a `100 Continue` already
  // queued for a pipelined request (it unshifts the head onto the queue), which garbles the stream.
  res.end(payload);
}

/** `head` with `extra`'s headers added (a loop: object spread of a header record costs several times more). */
export function withHeaders(head: Record<string, string | number>, extra: Readonly<Record<string, string>> | undefined): Record<string, string | number> {
  if (extra !== undefined) for (const name in extra) head[name] = extra[name] as string;
  return head;
}

/** Answers an error as `{"error", "code"}` with its status and headers (and `extra`, the request's own); never throws. */
export function sendError(res: ServerResponse, error: unknown, extra?: Readonly<Record<string, string>>): void {
  const own = error instanceof AgentRouterError ? error.headers : undefined;
  try {
    sendJson(res, statusOf(error), errorBody(error), own === undefined ? extra : { ...extra, ...own });
  } catch {
    // A status or header Node refuses to write (a subclass's own): a plain 500 rather than a throw
    // from a rejection handler, which would take the process down.
    sendJson(res, 500, errorBody(undefined), extra);
  }
}

/** The responses queued on each connection (see closeWithConnection), closed together by one listener. */
const queuedOn = new WeakMap<Socket, Set<ServerResponse>>();

/**
 * A response queued behind another on a pipelined HTTP/1.1 connection has no
 * socket yet, and Node 20 gives it no 'close' when the connection goes (only
 * the response on the socket gets one): what waits for its 'close' (the
 * turn's cut, a stream's wait for drain, AgentServer's close()) waited for
 * good. It gets the connection's 'close', as Node gives the one on the
 * socket, until it is given the socket itself. One listener per connection,
 * not per response: a client may pipeline hundreds. Calling it again for the
 * same response does nothing.
 */
export function closeWithConnection(req: IncomingMessage, res: ServerResponse): void {
  // On the socket (or HTTP/2, whose compatibility response's socket is never null): Node's own 'close' comes.
  if (res.socket !== null) return;
  const connection = req.socket;
  // Gone already (while a host's async middleware ran): its 'close' may have come, and would not come again.
  // A tick later, so that what the caller starts next hears it.
  if (connection.destroyed) return void process.nextTick(closeQueued, res);
  let queued = queuedOn.get(connection);
  if (queued === undefined) {
    const responses = new Set<ServerResponse>();
    queued = responses;
    queuedOn.set(connection, responses);
    connection.once('close', () => {
      queuedOn.delete(connection);
      for (const response of responses) closeQueued(response);
    });
  }
  if (queued.has(res)) return;
  const responses = queued;
  responses.add(res);
  res.once('socket', () => responses.delete(res));
}

function closeQueued(response: ServerResponse): void {
  // Not `destroyed`: one destroyed while queued (a stream's stall cut) gets no 'close' from Node either.
  if ((response as { closed?: boolean }).closed === true) return;
  // Marked closed as Node marks its own (`_closed`, behind `closed`), which Node's own 'close' checks: newer
  // Node also destroys the queued responses when the connection goes, and closes each a tick later.
  const closing = response as { destroyed: boolean; _closed?: boolean };
  closing.destroyed = true;
  closing._closed = true;
  response.emit('close');
}
