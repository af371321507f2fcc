import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/**
 * Destroys the response once the client has read nothing for `ms` (no byte
 * left for it in that time): a client that reads nothing would otherwise
 * hold its socket and the bytes written for it for as long as it stays
 * connected, since no socket timeout applies once a request is answered. One
 * that reads, however slowly, is never cut: each time the timer finds bytes
 * sent since, it starts again. Undefined when `ms` is Infinity (no limit);
 * the caller clears the timer.
 */
export function unlessReadWithin(res: ServerResponse, ms: number): NodeJS.Timeout | undefined {
  if (ms === Infinity) return undefined;
  let sent = bytesSent(res);
  const timer = setTimeout(() => {
    const now = bytesSent(res);
    if (now === sent) return void res.destroy();
    sent = now;
    timer.refresh();
  }, ms);
  timer.unref();
  return timer;
}

/**
 * After `end()`: times what the client has still to read, if anything
 * (see unlessReadWithin). A GET of a large state costs its sender a few
 * bytes; unread, its answer stayed in the server's memory for good.
 */
export function cutIfLeftUnread(res: ServerResponse, ms: number): void {
  if (res.writableFinished || res.destroyed) return;
  const stalled = unlessReadWithin(res, ms);
  if (stalled === undefined) return;
  const settled = (): void => clearTimeout(stalled);
  res.once('finish', settled);
  res.once('close', settled);
}

/**
 * A count that grows as the kernel takes the response's bytes: what the
 * connection was given, less what it still holds. A large write goes to
 * libuv whole and waits there, so `writableLength` does not move while a
 * client reads it; libuv's own queue (`writeQueueSize`, which Node reads
 * too) does. Under HTTP/2, the stream's own bytes still waiting, taken
 * negative: its session's socket goes on taking the other streams' bytes
 * while this one's client reads nothing (its flow-control window shut), and
 * a count of those would never tell that it stalled. The caller compares
 * counts only across a time nothing new was written.
 */
function bytesSent(res: ServerResponse): number {
  const waiting = (res as { stream?: { bufferSize?: unknown } }).stream?.bufferSize;
  if (typeof waiting === 'number') return -waiting;
  // null while HTTP/1.1 queues it behind a pipelined response (the connection's bytes then tell whether its
  // client reads) and once it is detached; undefined (node:http2's compatibility response) once the stream closed.
  const socket = (res.socket === null ? (res.req as { socket?: Socket } | undefined)?.socket : res.socket) as (Socket & { _handle?: { writeQueueSize?: unknown } | null }) | null | undefined;
  if (socket == null) return 0;
  const inLibuv = socket._handle?.writeQueueSize;
  return (socket.bytesWritten ?? 0) - (typeof inLibuv === 'number' ? inLibuv : socket.writableLength);
}
