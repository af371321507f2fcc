/** One dispatched SSE event. `event` is "message" when the stream named none. */
export interface SSEEvent {
  event: string;
  data: string;
  id: string | undefined;
}

export interface SSEParserOptions {
  onEvent: (event: SSEEvent) => void;
  /** Comment lines (`: ping`), without the colon and one leading space. */
  onComment?: ((comment: string) => void) | undefined;
  /** Reconnection time the server asked for, in milliseconds. */
  onRetry?: ((milliseconds: number) => void) | undefined;
  /**
   * Lines whose field the standard does not define, which it says to ignore
   * (and which are ignored without this hook). An escape hatch for servers
   * that send their own: llama.cpp's server reports a failed stream as
   * `error: {json}`. It may throw to stop the stream.
   */
  onUnknownField?: ((field: string, value: string) => void) | undefined;
  /**
   * Largest unterminated line or event kept in memory, in characters; past it
   * `feed` throws, so a hostile stream cannot grow memory without bound.
   * @defaultValue 8 MiB
   */
  maxBufferSize?: number | undefined;
}

export interface SSEParser {
  /** Feed decoded text; chunks may split lines, CRLF pairs and events anywhere. */
  feed(chunk: string): void;
  /**
   * Forget any partial line or event (an unterminated last event is dropped, as
   * the standard says) and start a new stream; the last event id is kept.
   */
  reset(): void;
}

/**
 * A parser following the WHATWG event-stream rules: LF, CR and CRLF line ends
 * (also split across chunks), a leading BOM, comments, one optional space
 * after the colon, multi-line data joined with "\n", `id` without NUL, numeric
 * `retry`, and events dispatched only at a blank line.
 */
export function createSSEParser(options: SSEParserOptions): SSEParser {
  if (typeof options !== 'object' || options === null || typeof options.onEvent !== 'function') {
    throw new TypeError('createSSEParser: pass an object with an onEvent function, e.g. createSSEParser({ onEvent(e) {} })');
  }
  const maxBufferSize = options.maxBufferSize ?? 8 * 1024 * 1024;
  let pending = '';
  let firstChunk = true;
  let skipLineFeed = false;
  let data: string[] = [];
  let dataSize = 0;
  let eventType = '';
  let lastEventId: string | undefined;

  function dispatch(): void {
    if (data.length === 0) {
      eventType = '';
      return;
    }
    const event: SSEEvent = { event: eventType || 'message', data: data.join('\n'), id: lastEventId };
    data = [];
    dataSize = 0;
    eventType = '';
    options.onEvent(event);
  }

  function processLine(line: string): void {
    if (line === '') return dispatch();
    if (line.charCodeAt(0) === 58 /* : */) {
      options.onComment?.(line.charCodeAt(1) === 32 ? line.slice(2) : line.slice(1));
      return;
    }
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    switch (field) {
      case 'data':
        dataSize += value.length + 1;
        if (dataSize > maxBufferSize) throw new RangeError(`SSE event is larger than ${maxBufferSize} characters`);
        data.push(value);
        break;
      case 'event':
        eventType = value;
        break;
      case 'id':
        if (!value.includes('\0')) lastEventId = value;
        break;
      case 'retry':
        if (/^\d+$/.test(value)) options.onRetry?.(Number(value));
        break;
      default:
        options.onUnknownField?.(field, value);
        break;
    }
  }

  return {
    feed(chunk: string): void {
      // An empty chunk must not clear a CR pending at the end of the last one.
      if (chunk.length === 0) return;
      if (firstChunk) {
        firstChunk = false;
        if (chunk.charCodeAt(0) === 0xfeff) chunk = chunk.slice(1);
      }
      let start = 0;
      if (skipLineFeed && chunk.charCodeAt(0) === 10) start = 1;
      skipLineFeed = false;
      for (let i = start; i < chunk.length; i++) {
        const code = chunk.charCodeAt(i);
        if (code !== 10 && code !== 13) continue;
        processLine(pending + chunk.slice(start, i));
        pending = '';
        if (code === 13) {
          if (i + 1 === chunk.length) skipLineFeed = true;
          else if (chunk.charCodeAt(i + 1) === 10) i++;
        }
        start = i + 1;
      }
      if (start < chunk.length) {
        pending += chunk.slice(start);
        if (pending.length > maxBufferSize) throw new RangeError(`SSE line is longer than ${maxBufferSize} characters`);
      }
    },
    reset(): void {
      // A reset starts a new stream (a reconnection), which may open with a BOM.
      firstChunk = true;
      pending = '';
      data = [];
      dataSize = 0;
      eventType = '';
      skipLineFeed = false;
    },
  };
}

export interface ReadSSEOptions extends Omit<SSEParserOptions, 'onEvent'> {
  /**
   * True once the stream's last event was seen (`[DONE]`, `message_stop`).
   * A consumer that stops then leaves the rest of the body (the chunked
   * encoding's end, as a rule) to be read in the background, so fetch can
   * reuse the connection; one that stops earlier cancels the body.
   */
  complete?: (() => boolean) | undefined;
  /**
   * Aborting it ends the reading with the signal's reason, wherever it stands. Pass the fetch's own
   * signal: Node 20's fetch aborted just as a body ends can leave the body's last read pending for good.
   */
  signal?: AbortSignal | undefined;
}

/**
 * Reads a fetch body as SSE events. Cancels the body when the consumer stops
 * early (break, throw), so the connection is not leaked.
 */
export async function* readSSE(
  body: ReadableStream<Uint8Array>,
  options: ReadSSEOptions = {},
): AsyncGenerator<SSEEvent> {
  const queue: SSEEvent[] = [];
  const parser = createSSEParser({ ...options, onEvent: (event) => queue.push(event) });
  const decoded = new TextDecoderStream() as unknown as TransformStream<Uint8Array, string>;
  const reader = (options.signal === undefined ? body.pipeThrough(decoded) : body.pipeThrough(decoded, { signal: options.signal })).getReader();
  let finished = false;
  try {
    while (true) {
      const { done, value } = await reader.read();
      if (done) {
        finished = true;
        return;
      }
      let failure: { error: unknown } | undefined;
      try {
        parser.feed(value);
      } catch (error) {
        failure = { error };
      }
      // Events that came before the failing line still go out first, in stream order.
      while (queue.length > 0) yield queue.shift() as SSEEvent;
      if (failure !== undefined) throw failure.error;
    }
  } finally {
    if (finished) reader.releaseLock();
    else if (options.complete?.() === true) void drainReader(reader);
    else {
      await reader.cancel().catch(() => {});
      reader.releaseLock();
    }
  }
}

/** Bytes (or characters) read past a body's last event, so its connection can be reused; past this it is cancelled. */
const DRAIN_LIMIT = 64 * 1024;
/**
 * Milliseconds a body's end is waited for past its last event; then it is
 * cancelled and its connection closed. The end (the chunked encoding's last
 * chunk) comes within milliseconds of the last event; a server that has not
 * ended its body after a second keeps it open (keepalive comments, a proxy's
 * heartbeat), and without a bound each turn would hold a socket for ever.
 */
export const DRAIN_TIME = 1000;

/**
 * Reads what is left of a fetch body whose last event was seen (the chunked
 * encoding's end, as a rule), so fetch can put the connection back in its
 * pool, then lets go of the reader; never rejects. Past DRAIN_LIMIT or
 * DRAIN_TIME the body is cancelled instead. Shared by readSSE and HTTPTransport.
 */
export async function drainReader(reader: ReadableStreamDefaultReader<{ length: number }>): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<'expired'>((resolve) => {
    timer = setTimeout(() => resolve('expired'), DRAIN_TIME);
    // A pending drain must not keep the process alive.
    timer.unref();
  });
  try {
    for (let size = 0; size <= DRAIN_LIMIT; ) {
      const step = await Promise.race([reader.read(), expired]);
      if (step === 'expired') break;
      if (step.done) return;
      size += step.value.length;
    }
    await reader.cancel();
  } catch {
    // aborted or broken off: the reply was whole already
  } finally {
    clearTimeout(timer);
    reader.releaseLock();
  }
}
