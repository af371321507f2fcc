/**
 * What the OpenAI and Anthropic models share: one POST over `fetch` that
 * streams SSE, an idle timeout, and retries before the first chunk. Every
 * failure becomes a `ModelProviderError` (codes in provider-errors.ts).
 */
import { ModelProviderError } from '../errors.ts';
import { mediaType } from '../lib/media-type.ts';
import { readSSE, type SSEEvent } from '../sse/parser.ts';
import { fetchFailure, noTlsFix } from '../lib/fetch-failure.ts';
import { fetchWithinOrigin } from '../lib/fetch-within-origin.ts';
import type { JsonObject } from '../types.ts';
import type { ModelChunk } from './model.ts';
import {
  badResponse,
  connectionFailed,
  fetchTimeoutError,
  notHttp,
  httpError,
  notAStream,
  notDecodable,
  noTls,
  redirected,
  streamInterrupted,
  timeoutError,
  tooLong,
  type ProviderContext,
} from './provider-errors.ts';
import { isObject } from './provider-reply.ts';

/** Turns a provider's SSE events into chunks; one per attempt. */
export interface StreamDecoder {
  /** Chunks for one event. Throws a `ModelProviderError` for an error event or malformed data. */
  event(event: SSEEvent): ModelChunk[];
  /** A line whose SSE field is not a standard one (see `onUnknownField`); may throw a `ModelProviderError`. */
  field?(name: string, value: string): void;
  /**
   * Chunks of a whole reply answered as one JSON by a server that ignored `stream: true`, which
   * also ends the reply; undefined when the JSON is no such reply. May throw as `event` does.
   */
  whole?(json: Record<string, unknown>): ModelChunk[] | undefined;
  /** True once the stream's last event arrived; reading stops there. */
  readonly done: boolean;
  /** Chunks to send at the end (usage); throws when the stream ended before its last event. */
  end(): ModelChunk[];
}

export interface ProviderRequest extends ProviderContext {
  url: string;
  headers: Headers;
  body: unknown;
  /** Seconds without response headers or body bytes before `model_timeout`; Infinity for none. */
  timeout: number;
  maxRetries: number;
  /** Bytes of one response body read at most; past it the turn fails (`model_bad_response`). */
  maxResponseSize: number;
  fetch: typeof fetch;
  signal: AbortSignal;
  decoder: () => StreamDecoder;
}

/** The OpenAI and Anthropic SDKs' schedule: 0.5 s doubling to 8 s, minus up to 25% jitter. */
const INITIAL_DELAY = 0.5;
const MAX_DELAY = 8;
/** A longer `Retry-After` is not waited for (an HTTP client is waiting); the backoff is used instead. */
const MAX_RETRY_AFTER = 60;

/**
 * The timers behind the idle timeout and the retry wait. Tests swap them for
 * a manual clock: node:test's mock timers also catch undici's shared internal
 * timer, and on Node 20 a stale mock of it stalls every later test's timers.
 */
export const providerTimers = {
  setTimeout: (callback: () => void, ms: number): unknown => setTimeout(callback, ms),
  clearTimeout: (handle: unknown): void => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/**
 * Streams one reply. Retries a retryable failure (408, 409, 429, 5xx, a dropped
 * connection) only while nothing has been yielded: once a chunk is out, a
 * retry would repeat text the caller already has. An abort of
 * `request.signal` cancels the fetch or the wait at once and rethrows the
 * signal's reason.
 */
export async function* streamFromProvider(request: ProviderRequest): AsyncGenerator<ModelChunk> {
  const { signal } = request;
  signal.throwIfAborted();
  for (let attempt = 0; ; attempt++) {
    let delivered = false;
    try {
      for await (const chunk of streamOnce(request)) {
        // Chunks parsed before an abort are not handed out after it.
        signal.throwIfAborted();
        delivered = true;
        yield chunk;
      }
      return;
    } catch (error) {
      signal.throwIfAborted();
      if (delivered || attempt >= request.maxRetries) throw error;
      if (!(error instanceof ModelProviderError) || !error.retryable) throw error;
      await sleep(retryDelay(attempt, error.retryAfter), signal);
    }
  }
}

async function* streamOnce(request: ProviderRequest): AsyncGenerator<ModelChunk> {
  const controller = new AbortController();
  const onAbort = (): void => controller.abort(request.signal.reason);
  request.signal.addEventListener('abort', onAbort, { once: true });
  let timedOut = false;
  let timer: unknown;
  // An idle timer, re-armed on headers and each body read; stopped while a chunk waits for a slow consumer, and `held`
  // keeps the SSE decoder's reads ahead meanwhile from re-arming it.
  let held = false;
  // Once the turn is over, reads of the body's rest (see drainReader) must not arm a timer again.
  let over = false;
  const stop = (): void => {
    held = true;
    providerTimers.clearTimeout(timer);
  };
  const arm = (): void => {
    held = false;
    providerTimers.clearTimeout(timer);
    if (request.timeout === Infinity || over) return;
    timer = providerTimers.setTimeout(() => {
      timedOut = true;
      controller.abort(new Error('model provider timed out'));
    }, request.timeout * 1000);
  };
  const fail = (error: unknown, stage: 'connect' | 'read'): unknown => {
    if (request.signal.aborted) return request.signal.reason;
    if (timedOut) return timeoutError(request, request.timeout);
    if (error instanceof ModelProviderError) return error;
    if (error instanceof RangeError) return badResponse(request, 'an SSE line or event is too large', error);
    // Reached, and answered in something that is not HTTP or with headers past fetch's 16 KiB, or refused
    // in the TLS handshake: not "could not reach", and a retry gets the same.
    const { kind, code } = fetchFailure(error);
    if (kind === 'fetch_timeout') return fetchTimeoutError(request, error);
    if (kind === 'not_http' || kind === 'headers_overflow') return notHttp(request, code, error);
    if (kind === 'undecodable') return notDecodable(request, code, error);
    if (kind === 'no_tls') return noTls(request, code, noTlsFix(code, 'baseURL'), error);
    return stage === 'connect' ? connectionFailed(request, error) : streamInterrupted(request, error);
  };

  try {
    arm();
    let response: Response;
    try {
      const init: RequestInit = { method: 'POST', headers: request.headers, body: JSON.stringify(request.body), redirect: 'manual', signal: controller.signal };
      response = await fetchWithinOrigin((url) => request.fetch(url.href, init), new URL(request.url));
    } catch (error) {
      throw fail(error, 'connect');
    }
    arm();
    try {
      if ((response.status >= 300 && response.status < 400) || response.type === 'opaqueredirect') throw await redirected(request, response);
      if (!response.ok) throw await httpError(request, response);
      const type = response.headers.get('content-type') ?? '';
      if (response.body === null) throw notAStream(request, response.status, '');
      const decoder = request.decoder();
      // The agent keeps the reply, so a provider that never ends would grow the heap without bound. Bytes, not text:
      // they also bound comments, unknown fields and usage-only events.
      let received = 0;
      const body = response.body.pipeThrough(
        new TransformStream<Uint8Array, Uint8Array>({
          transform(bytes, out) {
            received += bytes.length;
            if (received > request.maxResponseSize) {
              throw tooLong(request);
            }
            if (!held) arm();
            out.enqueue(bytes);
          },
        }),
        // An abort (the timeout's too) errors the reader at once, wherever the pipe stands.
        { signal: controller.signal },
      );
      if (/json/i.test(type)) {
        // Some gateways and compatible servers ignore `stream: true` and answer the whole reply at once.
        const text = await readText(body);
        let json: unknown;
        try {
          json = JSON.parse(text);
        } catch {
          // not JSON after all: an error page, reported as one below
        }
        const chunks = isObject(json) ? decoder.whole?.(json) : undefined;
        if (chunks === undefined) throw notAStream(request, response.status, text);
        stop();
        yield* chunks;
        yield* decoder.end();
        return;
      }
      let events = 0;
      const onUnknownField = (name: string, value: string): void => decoder.field?.(name, value);
      for await (const event of readSSE(body, { complete: () => decoder.done, onUnknownField })) {
        events++;
        for (const chunk of decoder.event(event)) {
          stop();
          yield chunk;
          arm();
        }
        if (decoder.done) break;
      }
      // Some servers stream SSE under another type (Flask's text/html default), so the type alone
      // does not refuse a body; one that held no event at all is a web page, not a cut stream.
      if (events === 0 && mediaType(type) !== 'text/event-stream') {
        throw badResponse(request, `a body of type ${JSON.stringify(type.slice(0, 60))} with no event in it; check baseURL points at a streaming API`);
      }
      yield* decoder.end();
    } catch (error) {
      throw fail(error, 'read');
    }
  } finally {
    over = true;
    providerTimers.clearTimeout(timer);
    request.signal.removeEventListener('abort', onAbort);
  }
}

/** A body's whole text (bounded by the byte count its pipe keeps). */
async function readText(body: ReadableStream<Uint8Array>): Promise<string> {
  const decoder = new TextDecoder();
  let text = '';
  for await (const bytes of body) text += decoder.decode(bytes, { stream: true });
  return text + decoder.decode();
}

/** Milliseconds before retry number `attempt + 1`: the provider's `Retry-After` when sane, else backoff with jitter. */
export function retryDelay(attempt: number, retryAfter: number | undefined, random: () => number = Math.random): number {
  if (retryAfter !== undefined && retryAfter <= MAX_RETRY_AFTER) return retryAfter * 1000;
  const backoff = Math.min(INITIAL_DELAY * 2 ** attempt, MAX_DELAY);
  return backoff * (1 - random() * 0.25) * 1000;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const onAbort = (): void => {
      providerTimers.clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = providerTimers.setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** The options every provider model takes beside its model name, key and base URL. */
export interface ProviderHTTPOptions {
  /** Extra request headers (e.g. `OpenAI-Organization`, OpenRouter's `HTTP-Referer`, `anthropic-beta`). */
  headers?: Record<string, string> | undefined;
  /**
   * Seconds without response headers or stream bytes before the turn fails with `model_timeout`;
   * Infinity for no limit. Node's own fetch still gives up after 300 s (docs/guide/models.md).
   * @defaultValue 120
   */
  timeout?: number | undefined;
  /**
   * Retries for 408, 409, 429, 5xx (Anthropic's 529 overloaded included) and dropped connections, only before the first chunk;
   * a provider's `x-should-retry: true` or `false` decides instead, as the OpenAI and Anthropic SDKs let it.
   * @defaultValue 2
   */
  maxRetries?: number | undefined;
  /**
   * Bytes of the provider's response body read at most for one reply (SSE framing included: OpenAI sends
   * 250 to 280 bytes a token, Anthropic fewer); past it the turn fails
   * with `model_bad_response`. Bounds memory against a provider that never ends its stream.
   * @defaultValue 64 MiB (about 240,000 OpenAI tokens)
   */
  maxResponseSize?: number | undefined;
  /** Extra request body fields, e.g. `{ temperature: 0.2 }`; a field set to undefined is left out (`{ stream_options: undefined }`). */
  body?: Readonly<Record<string, JsonObject[string] | undefined>> | undefined;
  /** A `fetch` to use instead of the global one (proxies, tests). */
  fetch?: typeof fetch | undefined;
}

/** Checks the options every provider shares; misuse throws a TypeError that names the fix. */
export function checkCommonOptions(
  factory: string,
  options: { model?: unknown; apiKey?: unknown; headers?: unknown; timeout?: unknown; maxRetries?: unknown; maxResponseSize?: unknown; baseURL?: unknown },
): void {
  if (typeof options.model !== 'string' || options.model === '') {
    throw new TypeError(`${factory}: pass the model name, e.g. ${factory}({ model: '...', apiKey })`);
  }
  const { timeout } = options;
  // A timer takes at most 2^31 - 1 ms; Node fires a longer one at once.
  if (timeout !== undefined && (typeof timeout !== 'number' || !(timeout > 0) || (timeout > MAX_TIMER_SECONDS && timeout !== Infinity))) {
    throw new TypeError(`${factory}: timeout is in seconds and must be a positive number up to ${MAX_TIMER_SECONDS} (about 24 days), or Infinity for none, e.g. timeout: 60`);
  }
  if (options.maxRetries !== undefined && (!Number.isInteger(options.maxRetries) || (options.maxRetries as number) < 0)) {
    throw new TypeError(`${factory}: maxRetries must be a whole number >= 0, e.g. maxRetries: 2`);
  }
  // fetch refuses such a value on every turn with a TypeError that quotes it, key and all, and
  // the router logs that: refused here, once, without showing it.
  if (typeof options.apiKey === 'string' && !isHeaderValue(options.apiKey)) {
    throw new TypeError(`${factory}: apiKey holds a line break, a NUL or a character outside Latin-1 (a wrapped line in a key file, a pasted quote or zero-width space?); pass the key alone, on one line`);
  }
  if (options.headers !== undefined) {
    try {
      new Headers(options.headers as Record<string, string>);
    } catch {
      throw new TypeError(`${factory}: headers holds an invalid header name or value (line breaks, NUL and characters outside Latin-1 are not allowed); the value is not shown, as it may be a key`);
    }
  }
  const { maxResponseSize } = options;
  if (maxResponseSize !== undefined && (!Number.isInteger(maxResponseSize) || (maxResponseSize as number) < 1)) {
    throw new TypeError(`${factory}: maxResponseSize is in bytes and must be a whole number >= 1, e.g. maxResponseSize: 64 * 1024 * 1024`);
  }
  const { baseURL } = options;
  if (baseURL !== undefined && (typeof baseURL !== 'string' || !isHttpURL(baseURL))) {
    const example = factory === 'anthropicModel' ? 'https://api.anthropic.com/v1' : 'http://localhost:11434/v1';
    throw new TypeError(`${factory}: baseURL must be an absolute http(s) URL, e.g. '${example}'`);
  }
  // fetch refuses such a URL on every request, quoting it, password and all, into the error.
  if (baseURL !== undefined) {
    const { username, password } = new URL(baseURL);
    if (username !== '' || password !== '') {
      throw new TypeError(`${factory}: baseURL must not hold a user name or password (fetch refuses such URLs); pass the key as apiKey, or a header in headers`);
    }
  }
}

const MAX_TIMER_SECONDS = Math.floor((2 ** 31 - 1) / 1000);

/**
 * About 240,000 tokens as OpenAI streams them (250 to 280 bytes a chunk),
 * past the longest replies models allow (128k output tokens), reasoning
 * deltas, which use bytes and make no text, included. What the agent keeps
 * is the reply's text, a few bytes a token: memory stays far below this.
 */
export const DEFAULT_MAX_RESPONSE_SIZE = 64 * 1024 * 1024;

/**
 * Whether `value`, trimmed as the adapters send it, is a header value fetch
 * takes: Latin-1, no line break or NUL. Trimmed first: a line break left
 * at the start of a key ends up inside `Bearer <key>`, where fetch refuses it.
 */
export function isHeaderValue(value: string): boolean {
  return !/[\r\n\0]|[^\x00-\xff]/.test(value.trim());
}

/** An absolute http(s) URL: what a provider's base URL must be. */
export function isHttpURL(value: string): boolean {
  return /^https?:\/\//i.test(value) && URL.canParse(value);
}

/**
 * `path` added to baseURL's path, with one slash between them, before its
 * query: older Azure OpenAI URLs carry the API version as one
 * (`.../openai/deployments/gpt4o?api-version=2024-10-21`), which must stay last.
 */
export function joinURL(baseURL: string, path: string): string {
  const url = new URL(baseURL);
  url.pathname = `${url.pathname.replace(/\/+$/, '')}/${path}`;
  return url.href;
}
