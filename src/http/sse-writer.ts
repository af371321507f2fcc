import type { ServerResponse } from 'node:http';
import { formatComment, formatEvent } from '../sse/format.ts';
import { cutIfLeftUnread, unlessReadWithin } from './unread.ts';
import { withHeaders } from './respond.ts';

export interface SSEWriterOptions {
  /** Seconds between `: ping` comments on an idle stream; 0 turns them off. @defaultValue 15 */
  pingInterval?: number | undefined;
  /**
   * Seconds a client may leave written bytes unread (a write waiting for
   * `drain`, or the last frames after `end`) before the response is
   * destroyed, as a client that is gone. 0 or Infinity: no limit.
   * @defaultValue no limit
   */
  stallTimeout?: number | undefined;
  /** Extra response headers (CORS, request id). */
  headers?: Readonly<Record<string, string>> | undefined;
}

/**
 * Frames waiting for the next tick past this size are written at once, so
 * a burst never sits in memory beyond what one socket write holds anyway
 * (the response's default high-water mark).
 */
const FLUSH_AT = 16 * 1024;

/**
 * No `Connection` header: Node's HTTP/1.1 sends keep-alive by itself (or
 * close, while a server shuts down), and HTTP/2 forbids it (node:http2's
 * compatibility API drops it with a warning in the process's output).
 */
const SSE_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'Content-Type': 'text/event-stream',
  'Cache-Control': 'no-cache',
  // Tells nginx (and proxies that copy it) not to buffer the stream.
  'X-Accel-Buffering': 'no',
});

/**
 * Writes one SSE response: headers flushed at once, one event per chunk,
 * `: ping` while idle, and write backpressure honoured (a slow reader makes
 * `send` wait for `drain`, so a stream never piles up in server memory).
 *
 * Events sent in the same tick go out as one `res.write`: a model that hands
 * over several chunks at once (a provider's network read often holds many
 * events) costs one chunked-encoding frame instead of one per event. They
 * are flushed in `process.nextTick`, before any I/O, so nothing waits longer.
 */
export class SSEWriter {
  readonly #res: ServerResponse;
  #pings: PingGroup | undefined;
  /** Sent anything since the last ping() call; the headers count, so a new stream is not pinged at once. */
  #wroteSincePing = true;
  #ended = false;
  /** Frames sent this tick, not yet written. */
  #pending: string | undefined;
  /**
   * `res.flush()` where a compression middleware added one (Express's
   * `compression()`): it gzips event streams and holds every frame until the
   * response ends unless flushed after each write.
   */
  readonly #flushCompressor: (() => void) | undefined;
  /** See SSEWriterOptions.stallTimeout; Infinity for none. */
  readonly #stallMs: number;
  /** Ends the wait for `drain` now (called by end(), so a waiting turn lets go of what it holds). */
  #stopWaiting: (() => void) | undefined;
  /** The response's 'drain' listener, added at the first wait: it ends the wait in progress, if any. */
  #onDrain: (() => void) | undefined;

  constructor(res: ServerResponse, options: SSEWriterOptions = {}) {
    this.#res = res;
    const stall = options.stallTimeout ?? 0;
    this.#stallMs = stall > 0 ? stall * 1000 : Infinity;
    const flush = (res as { flush?: unknown }).flush;
    this.#flushCompressor = typeof flush === 'function' ? () => flush.call(res) : undefined;
    // writeHead with an object, not setHeader: with no header set before (CORS, a host's), Node
    // writes these straight into the head and keeps no header map for the stream's life.
    res.writeHead(200, options.headers === undefined ? SSE_HEADERS : withHeaders({ ...SSE_HEADERS }, options.headers));
    res.flushHeaders();
    const interval = options.pingInterval ?? 15;
    if (interval > 0) {
      this.#pings = PingGroup.for(interval * 1000);
      this.#pings.add(this);
    }
  }

  /** False once the client is gone or the stream ended. */
  get open(): boolean {
    return !this.#ended && !gone(this.#res);
  }

  /**
   * Sends one chunk as one event (`data:` lines). Returns a promise to await
   * before the next send when the client reads slower than we write (wait
   * for `drain`), undefined when the next may go at once: most chunks, and
   * an await per chunk is measurable in a burst.
   */
  send(chunk: string, event?: string, id?: string, seq?: number): Promise<void> | undefined {
    return this.#write(formatEvent(chunk, event, id, seq));
  }


  #write(frame: string): Promise<void> | undefined {
    if (!this.open) return undefined;
    this.#wroteSincePing = true;
    if (this.#pending === undefined) {
      this.#pending = frame;
      process.nextTick(SSEWriter.#flushPending, this);
    } else {
      this.#pending += frame;
    }
    // A client already behind, or a burst past one write's worth: write now, and wait if the socket says so.
    if (this.#pending.length < FLUSH_AT && !needsDrain(this.#res)) return undefined;
    return this.#flush() ? undefined : this.#drained();
  }

  /** A static function, not a closure per tick, for process.nextTick. */
  static #flushPending(writer: SSEWriter): void {
    writer.#flush();
  }

  /** Writes the frames sent this tick; false when the socket asks to wait for `drain`. */
  #flush(): boolean {
    const pending = this.#pending;
    if (pending === undefined) return true;
    this.#pending = undefined;
    if (!this.open) return true;
    const written = this.#res.write(pending);
    this.#flushCompressor?.();
    return written;
  }

  #drained(): Promise<void> {
    return new Promise<void>((resolve) => {
      const res = this.#res;
      // A client that reads nothing would hold this wait, and with it the turn (a remote one's connection slot too).
      const stalled = unlessReadWithin(this.#res, this.#stallMs);
      const done = (): void => {
        clearTimeout(stalled);
        res.off('close', done);
        this.#stopWaiting = undefined;
        resolve();
      };
      this.#stopWaiting = done;
      // One 'drain' listener for the stream's life, not one per wait: compression() hands 'drain'
      // listeners to its gzip stream but does not route off() there, so each wait's would stay behind.
      if (this.#onDrain === undefined) {
        this.#onDrain = () => this.#stopWaiting?.();
        res.on('drain', this.#onDrain);
      }
      res.on('close', done);
    });
  }

  /**
   * Called by the ping group's timer, twice per interval: a stream that sent
   * nothing since the last call gets a ping, which counts as sending. So the
   * longest silence is one interval (a frame just after a call is followed
   * by a call that finds it, then one that pings), and an idle stream is
   * pinged once per interval.
   */
  ping(): void {
    if (!this.open) return this.#stopPing();
    if (this.#wroteSincePing) {
      this.#wroteSincePing = false;
    } else if (this.#res.writableLength === 0) {
      this.#res.write(formatComment('ping'));
      this.#flushCompressor?.();
      this.#wroteSincePing = true;
    }
  }

  #stopPing(): void {
    this.#pings?.delete(this);
    this.#pings = undefined;
  }

  /** Ends the stream, with a last frame (`event: done`, `event: error`, the typed stream's last event) if given. */
  end(frame?: string): void {
    this.#stopPing();
    if (this.#ended) return;
    this.#ended = true;
    const pending = this.#pending;
    this.#pending = undefined;
    if (gone(this.#res)) return;
    // The frames of this tick and the last one in one write.
    const last = pending === undefined ? frame : frame === undefined ? pending : pending + frame;
    const res = this.#res;
    if (last === undefined) res.end();
    else res.end(last);
    this.#stopWaiting?.();
    // Bytes a stalled client never reads would keep the socket (and them) for as long as it stays connected.
    cutIfLeftUnread(res, this.#stallMs);
  }
}

/**
 * The client is gone. node:http2's compatibility response has no
 * `destroyed`: its stream tells. Otherwise a stream pulled from an iterator
 * (a remote's, a subclass's own stream()) went on writing after the client
 * cancelled, and a write that then waited for `drain` waited for good: the
 * 'close' that ends such a wait had come already, so the stream and its
 * agent were held for ever.
 */
function gone(res: ServerResponse): boolean {
  return res.destroyed || (res as { stream?: { destroyed?: boolean } }).stream?.destroyed === true;
}

/**
 * The response holds as much as it should before a `drain`. Node 20's
 * HTTP/2 compatibility response has no `writableNeedDrain` (undefined, taken
 * as no): a client that read nothing then had every small frame buffered,
 * the whole reply in memory, and its stall was never timed. Its buffered
 * length against its high-water mark tells the same.
 */
function needsDrain(res: ServerResponse): boolean {
  const need = (res as { writableNeedDrain?: boolean }).writableNeedDrain;
  return need ?? res.writableLength >= res.writableHighWaterMark;
}

/**
 * One timer per ping interval for every open stream, instead of one per
 * stream: a timer and its closure were part of the heap each held stream
 * kept. It calls each stream every half interval (see SSEWriter.ping): a
 * stream gets its first ping within one interval of going idle, wherever
 * in the timer's cycle it last sent.
 */
class PingGroup {
  static readonly #groups = new Map<number, PingGroup>();
  readonly #writers = new Set<SSEWriter>();
  readonly #ms: number;
  #timer: NodeJS.Timeout | undefined;

  static for(ms: number): PingGroup {
    let group = PingGroup.#groups.get(ms);
    if (group === undefined) {
      group = new PingGroup(ms);
      PingGroup.#groups.set(ms, group);
    }
    return group;
  }

  constructor(ms: number) {
    this.#ms = ms;
  }

  add(writer: SSEWriter): void {
    this.#writers.add(writer);
    if (this.#timer !== undefined) return;
    this.#timer = setInterval(() => {
      for (const each of this.#writers) each.ping();
    }, this.#ms / 2);
    this.#timer.unref();
  }

  delete(writer: SSEWriter): void {
    this.#writers.delete(writer);
    if (this.#writers.size > 0 || this.#timer === undefined) return;
    clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
