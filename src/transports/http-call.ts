import { AgentRouterError, type UpstreamError } from '../errors.ts';
import { mayHoldHugeNumber, nestingDepth } from '../lib/json.ts';
import { mediaType } from '../lib/media-type.ts';
import { createSSEParser, drainReader } from '../sse/parser.ts';
import { fetchWithinOrigin } from '../lib/fetch-within-origin.ts';
import { stopWatching, whenAborted } from '../lib/signal-watch.ts';
import { describeRemote } from './remote-url.ts';
import type { Slots } from './slots.ts';
import { allSlotsBusy, badResponse, fetchFailed, incomplete, KEPT_STATUSES, readFailed, statusError, streamFailed, timedOut } from './upstream-errors.ts';
import { Watchdog } from './watchdog.ts';
import { failSpan, linkUnder, SPAN_KIND, startSpan, traceHeaders, type TraceAttributes, type TraceLink, type TraceSpan } from '../lib/trace.ts';

/** What one read of a body gives; spelled through the reader, since the DOM library's name is not in Node's types. */
type ReadResult = Awaited<ReturnType<ReadableStreamDefaultReader<Uint8Array>['read']>>;

/** The `fetch` HTTPTransport calls: the global one, or any function shaped like it. */
export type FetchLike = (input: URL, init: RequestInit) => Promise<Response>;

/** What every call of one transport shares. */
export interface CallSettings {
  fetch: FetchLike;
  /** The configured headers, names lowercased, without the three the transport sets itself. */
  headers: Readonly<Record<string, string>>;
  timeout: number;
  slots: Slots;
  maxResponseSize: number;
}

export interface CallRequest {
  url: URL;
  method: 'GET' | 'POST';
  body: string | undefined;
  stream: boolean;
  /** The typed stream (`stream=events`): text deltas as text, tool events relayed as they came. */
  typed?: boolean | undefined;
  requestId: string;
  /** The forwarded headers of the caller's request (HTTPTransport's `forwardHeaders`), if any. */
  forwarded: Readonly<Record<string, string>> | undefined;
  signal: AbortSignal | undefined;
  /** The caller's place in a trace: the call's client span starts under it, and its traceparent is sent. */
  trace?: TraceLink | undefined;
}

/** A 4xx error body is relayed, so it is read; nothing longer than this is an error message. */
const ERROR_BODY_LIMIT = 64 * 1024;
const noop = (): void => {};

/**
 * Deepest nesting of a remote's JSON reply: ten times what a request body may
 * have (a remote's result or state is not the caller's input), well short of
 * where writing it out fails.
 */
const MAX_REPLY_DEPTH = 1000;

const INFINITY = new Error('a number too large to represent');
const refuseInfinity = (_key: string, value: unknown): unknown => {
  if (typeof value === 'number' && !Number.isFinite(value)) throw INFINITY;
  return value;
};

/**
 * One request to a remote agent router, from the first byte out to the last
 * byte in. It owns everything the request holds (a connection slot, the
 * inactivity watchdog, the listener on the caller's signal, the response
 * body) and lets go of all of it exactly once, on every path: the body is
 * read to its end or cancelled, because an unread fetch body pins its
 * connection in Node.
 */
export class RemoteCall {
  /** Origin and path of the remote route, for messages (never credentials, never the query). */
  readonly remote: string;
  /** The remote's origin (URL.origin never holds credentials), named by the errors it sends that are relayed. */
  readonly origin: string;
  /** Settles once the remote answered 2xx (with SSE for a stream); rejects with the AgentRouterError to answer. */
  readonly response: Promise<Response>;
  readonly #settings: CallSettings;
  readonly #controller = new AbortController();
  readonly #watchdog: Watchdog;
  readonly #callerSignal: AbortSignal | undefined;
  readonly #typed: boolean;
  #body: ReadableStream<Uint8Array> | null = null;
  #reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
  #holdsSlot = false;
  #finished = false;
  /** The call's client span, with a tracer. */
  #span: TraceSpan | undefined;

  constructor(settings: CallSettings, request: CallRequest) {
    this.#settings = settings;
    this.remote = describeRemote(request.url);
    this.origin = request.url.origin;
    // First: an already aborted signal finishes the call at once, and a span must not start after that.
    const traced = this.#traced(request);
    this.#callerSignal = request.signal;
    this.#typed = request.typed === true;
    this.#controller.signal.addEventListener('abort', this.#onAbort, { once: true });
    // Before a slot is held the remote has not been asked yet: the wait is this transport's own queue.
    this.#watchdog = new Watchdog(settings.timeout * 1000, () =>
      this.#controller.abort(this.#holdsSlot ? timedOut(this.remote, settings.timeout) : allSlotsBusy(this.remote, settings.timeout)),
    );
    if (request.signal?.aborted === true) this.#controller.abort(request.signal.reason);
    else if (request.signal !== undefined) whenAborted(request.signal, this.#onCallerAbort);
    this.response = this.#send(traced);
    this.response.catch(noop); // a stream nobody awaits must not crash the process
  }

  /** Reads the whole body as a JSON object, or throws 502. */
  async readJson(response: Response): Promise<Record<string, unknown>> {
    try {
      const text = await this.#readText(response, this.#settings.maxResponseSize);
      // Nesting the caller's reply could not be written back out with (JSON.stringify overflows the stack
      // at about 4,000 levels here): a 500 far from the cause. Scanned only where it is possible at all.
      if (text.length > 2 * MAX_REPLY_DEPTH && nestingDepth(text) > MAX_REPLY_DEPTH) {
        throw this.badResponse(`JSON nested deeper than ${MAX_REPLY_DEPTH} levels`);
      }
      let reply: unknown;
      try {
        // A number JSON.parse makes Infinity would reach the caller as null: refused, as a request body's is.
        reply = mayHoldHugeNumber(text) ? JSON.parse(text, refuseInfinity) : JSON.parse(text);
      } catch (error) {
        throw this.badResponse(error === INFINITY ? 'JSON holding a number too large to represent' : 'a body that is not JSON');
      }
      if (typeof reply !== 'object' || reply === null || Array.isArray(reply)) throw this.badResponse('JSON that is not an object');
      return reply as Record<string, unknown>;
    } finally {
      this.finish();
    }
  }

  /**
   * Yields the `data` of each plain SSE event. Ends at `event: done`; throws
   * on `event: error`, on a body that ends before `done`, and on a broken
   * connection, so a relaying router ends its own stream with an error too.
   */
  async *chunks(): AsyncGenerator<string | RelayedEvent, void, undefined> {
    const typed = this.#typed;
    const response = await this.response;
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    this.#reader = reader;
    const decoder = new TextDecoder();
    const queue: Array<string | RelayedEvent> = [];
    let finished = false;
    let failure: Error | undefined;
    const parser = createSSEParser({
      maxBufferSize: this.#settings.maxResponseSize,
      onEvent: (event) => {
        if (finished) return;
        if (typed) {
          const kind = event.event;
          if (kind === 'text.delta') {
            const text = deltaText(event.data);
            if (text === undefined) failure = this.badResponse('a text.delta event without a "text" string');
            else if (text !== '') queue.push(text);
          } else if (kind === 'tool.call' || kind === 'tool.result' || kind === 'tool.approval_required') queue.push({ event: kind, data: event.data });
          else if (kind === 'turn.finished') finished = true;
          else if (kind === 'turn.paused') {
            // The remote turn paused: its list goes on to the front's own turn.paused.
            queue.push({ event: kind, data: event.data });
            finished = true;
          }
          else if (kind === 'turn.failed') failure = streamFailed(this.remote, this.origin, event.data);
          if (failure !== undefined) finished = true;
          return;
        }
        if (event.event === 'message') {
          if (event.data !== '') queue.push(event.data);
        } else if (event.event === 'done') finished = true;
        else if (event.event === 'error') {
          finished = true;
          failure = streamFailed(this.remote, this.origin, event.data);
        }
      },
    });
    let drained = false;
    // The whole stream is bounded too, not only each event: a remote that never ends its reply
    // would otherwise be relayed for ever (the transport's timeout cuts only silence).
    let received = 0;
    try {
      while (!finished) {
        const step = await this.#read(reader);
        if (step.done) throw incomplete(this.remote);
        this.#watchdog.touch();
        try {
          parser.feed(decoder.decode(step.value, { stream: true }));
        } catch (error) {
          throw this.badResponse(`an SSE event larger than ${this.#settings.maxResponseSize} characters`, error);
        }
        // Checked after the parse: what follows `done` in the same read is a tail, not the reply.
        received += step.value.length;
        if (!finished && received > this.#settings.maxResponseSize) {
          throw this.badResponse(`a stream longer than maxResponseSize (${this.#settings.maxResponseSize} bytes) in all`);
        }
        while (queue.length > 0) {
          this.#watchdog.pause();
          yield queue.shift() as string | RelayedEvent;
          this.#watchdog.resume();
        }
      }
      if (failure !== undefined) throw failure;
      drained = true;
      // Not awaited: the caller has its whole reply at `done`, even from a remote that keeps the
      // response open after it; the rest is read in the background so the connection can be reused.
      void drainReader(reader).finally(() => this.finish());
    } catch (error) {
      // A stream that fails after its 200 (an error event, a cut, a bad event) fails the call's span too.
      if (this.#span !== undefined) failSpan(this.#span, error);
      throw error;
    } finally {
      if (!drained) {
        await reader.cancel().catch(noop);
        this.finish();
      }
    }
  }

  /** An error for a 2xx answer that is not what the route promises. */
  badResponse(what: string, cause?: unknown): UpstreamError {
    return badResponse(this.remote, what, cause);
  }

  /** Lets go of the slot, the watchdog and the caller's signal; idempotent. */
  finish(): void {
    if (this.#finished) return;
    this.#finished = true;
    this.#span?.end();
    this.#watchdog.stop();
    if (this.#callerSignal !== undefined) stopWatching(this.#callerSignal, this.#onCallerAbort);
    // Node's fetch keeps the signal it was given alive with its request; this listener would keep
    // the call, its errored body and through it the socket and the request: a cycle never collected.
    this.#controller.signal.removeEventListener('abort', this.#onAbort);
    if (!this.#holdsSlot) return;
    // Node's fetch puts the socket back in its pool a tick after the body
    // ends; a request let in sooner would open a new connection instead.
    const slots = this.#settings.slots;
    setImmediate(() => slots.release());
  }

  async #send(request: CallRequest): Promise<Response> {
    const signal = this.#controller.signal;
    const headers: Record<string, string> = {
      ...this.#settings.headers,
      ...request.forwarded,
      accept: request.stream ? 'text/event-stream' : 'application/json',
      'x-request-id': request.requestId,
    };
    if (request.body !== undefined) headers['content-type'] = 'application/json';
    traceHeaders(request.trace, (name, value) => (headers[name] = value));
    let response: Response;
    try {
      await this.#settings.slots.acquire(signal);
      this.#holdsSlot = true;
      // The remote's silence is counted from now: the wait for the slot was this transport's own.
      this.#watchdog.touch();
      signal.throwIfAborted(); // aborted while the slot was being granted: send nothing
      // redirect: 'manual' hands a 3xx back instead of following it, so the configured credentials can never
      // be sent to another origin; a 307 or 308 within the remote's origin is followed.
      const init: RequestInit = { method: request.method, headers, body: request.body ?? null, redirect: 'manual', signal };
      response = await fetchWithinOrigin((url) => this.#settings.fetch(url, init), request.url);
    } catch (error) {
      const failure = this.#failure(error, () => fetchFailed(this.remote, error));
      if (this.#span !== undefined) failSpan(this.#span, failure);
      this.finish();
      throw failure;
    }
    this.#span?.setAttribute('http.response.status_code', response.status);
    this.#body = response.body;
    this.#watchdog.touch();
    try {
      if (response.status < 200 || response.status >= 300) throw await this.#statusError(response);
      const type = response.headers.get('content-type') ?? '';
      if (request.stream && mediaType(type) !== 'text/event-stream') {
        throw this.badResponse(`content type ${JSON.stringify(type.slice(0, 100))} instead of text/event-stream`);
      }
      if (response.body === null) throw this.badResponse('no body');
      return response;
    } catch (error) {
      if (this.#span !== undefined) failSpan(this.#span, error);
      await this.#cancelBody();
      this.finish();
      throw error;
    }
  }

  /** With a tracer, the call's client span, and the request sending its traceparent. */
  #traced(request: CallRequest): CallRequest {
    const link = request.trace;
    if (link?.tracer === undefined) return request;
    const attributes: TraceAttributes = { 'http.request.method': request.method, 'url.full': this.remote, 'server.address': request.url.hostname };
    if (request.url.port !== '') attributes['server.port'] = Number(request.url.port);
    this.#span = startSpan(link, request.method, SPAN_KIND.client, attributes);
    return { ...request, trace: linkUnder(link, this.#span) };
  }

  async #statusError(response: Response): Promise<AgentRouterError> {
    const { status } = response;
    let body: unknown;
    if ((status >= 400 && status < 500) || (status >= 502 && status <= 504)) {
      // Only a 4xx, 502, 503 or 504 body is read: it may hold an error to relay. Others are cancelled unread.
      try {
        body = JSON.parse(await this.#readText(response, ERROR_BODY_LIMIT));
      } catch (error) {
        // A 413, 429, 503 or 504 stays one, whatever its body (too large, cut): what the caller learns from it matters more.
        if (this.#controller.signal.aborted || (error instanceof AgentRouterError && status < 500 && !KEPT_STATUSES.has(status))) throw error;
      }
    }
    return statusError(this.remote, this.origin, status, body, response.headers.get('retry-after'));
  }

  async #readText(response: Response, limit: number): Promise<string> {
    if (response.body === null) return '';
    const reader = response.body.getReader();
    this.#reader = reader;
    const parts: Uint8Array[] = [];
    let size = 0;
    while (true) {
      const step = await this.#read(reader);
      if (step.done) break;
      this.#watchdog.touch();
      size += step.value.byteLength;
      if (size > limit) {
        await reader.cancel().catch(noop);
        throw this.badResponse(`a body larger than ${limit} bytes`);
      }
      parts.push(step.value);
    }
    return Buffer.concat(parts, size).toString('utf8');
  }

  /** One read; a failure while the remote is sending means it broke off (or we aborted). */
  async #read(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<ReadResult> {
    let step: ReadResult;
    try {
      step = await reader.read();
    } catch (error) {
      throw this.#failure(error, () => readFailed(this.remote, error));
    }
    // A fetch that ignores the signal may still hand over data after an abort.
    if (this.#controller.signal.aborted) throw this.#controller.signal.reason;
    return step;
  }

  /** The error to throw: the abort reason (timeout or the caller's) wins over what fetch made of it. */
  #failure(error: unknown, otherwise: () => AgentRouterError): unknown {
    if (this.#controller.signal.aborted) return this.#controller.signal.reason;
    if (error instanceof AgentRouterError) return error;
    return otherwise();
  }

  async #cancelBody(): Promise<void> {
    const target = this.#reader ?? this.#body;
    if (target === null || target === undefined) return;
    if (target instanceof ReadableStream && target.locked) return;
    await target.cancel().catch(noop);
  }

  readonly #onCallerAbort = (): void => {
    this.#controller.abort(this.#callerSignal?.reason);
  };

  /** Timeout or caller abort: stop the fetch and drop a body nobody may ever read. */
  readonly #onAbort = (): void => {
    void this.#cancelBody();
    this.finish();
  };
}

/** A typed stream event relayed as the remote sent it: its name and its data, unparsed. */
export interface RelayedEvent {
  event: string;
  data: string;
}

function deltaText(data: string): string | undefined {
  try {
    const text = (JSON.parse(data) as { text?: unknown } | null)?.text;
    return typeof text === 'string' ? text : undefined;
  } catch {
    return undefined;
  }
}
