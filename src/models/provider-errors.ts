/**
 * Every failure of a model provider as a `ModelProviderError` (provider-reply.ts
 * reads what the provider said). Codes (the router answers 502, or 504 for
 * `model_timeout`):
 *
 * | code | when |
 * |---|---|
 * | `model_auth_failed` | HTTP 401 or 403: bad key, no access to the model |
 * | `model_not_found` | HTTP 404: unknown model or wrong baseURL |
 * | `model_rate_limited` | HTTP 429 |
 * | `model_unavailable` | HTTP 5xx (Anthropic's 529 overloaded too) |
 * | `model_request_rejected` | any other HTTP 4xx (but see `model_refused`) |
 * | `model_redirect` | HTTP 3xx other than a 307/308 on baseURL's origin (those are followed): the key goes to that origin only |
 * | `model_stream_error` | an error event inside a stream that began with 200 (one whose `code` is an HTTP status, or an Anthropic error `type` such as `overloaded_error`, gets that status's code above) |
 * | `model_bad_response` | a 200 that is neither SSE nor a whole reply as JSON (a server that ignored `stream: true`), data that is not a JSON object, an oversized line, a reply past maxResponseSize, an answer that is not HTTP (a malformed status line or chunk, headers over fetch's 16 KiB), a body that does not decode as its `Content-Encoding` says |
 * | `model_refused` | the model refused (Anthropic's `stop_reason: "refusal"`, OpenAI's `delta.refusal`), a content filter cut the reply (`finish_reason: "content_filter"`) or refused the prompt (Azure's HTTP 400 with `error.code: "content_filter"`) |
 * | `model_connection_failed` | no response at all (refused, DNS, TLS); not retried when TLS failed for good (a certificate not trusted here or not naming the host, an https baseURL to a plain HTTP port) |
 * | `model_stream_interrupted` | the stream ended before its last event (a cut connection); a clean end after OpenAI's `finish_reason` or Anthropic's `stop_reason` is a whole reply |
 * | `model_timeout` | no headers or no bytes for `timeout` seconds (or for Node's fetch's own 300 s) |
 */
import { ModelProviderError } from '../errors.ts';
import { isObject, oneLine, parseRetryAfter, providerMessage, redact } from './provider-reply.ts';

/** Who is failing, for error messages. */
export interface ProviderContext {
  /** `openai` or `anthropic`: the `provider` of every error. */
  provider: string;
  /** Names the model in messages, e.g. `openai:gpt-4o-mini`. */
  label: string;
  /** Strings cut out of every provider message (the API key, credentials in `headers`). */
  secrets: readonly string[];
}

const MAX_ERROR_BODY = 64 * 1024;
/** Error types worth a retry (before the first chunk): the provider's trouble, not the request's. */
const RETRYABLE_TYPES = new Set(['overloaded_error', 'api_error', 'rate_limit_error', 'timeout_error', 'server_error', 'insufficient_system_resource']);

/** Maps a non-2xx answer to its error, with the provider's message and type. */
export async function httpError(context: ProviderContext, response: Response): Promise<ModelProviderError> {
  const status = response.status;
  const text = await readLimited(response);
  const { message, type } = providerMessage(text);
  const [code, hint] = status < 500 && promptFiltered(text) ? ['model_refused', "the provider's content filter refused the prompt"] : statusCode(status);
  const detail = message === undefined ? '' : ` (${type === undefined ? '' : `${type}: `}${message})`;
  return new ModelProviderError(code, redact(`${context.label}: provider answered HTTP ${status}${detail}; ${hint}`, context.secrets), {
    provider: context.provider,
    providerStatus: status,
    providerType: type,
    retryable: shouldRetry(status, response.headers),
    retryAfter: parseRetryAfter(response.headers),
  });
}

/**
 * OpenAI's and Anthropic's SDKs' rule: retry a request timeout (408), a
 * lock timeout (409), a rate limit (429) and the server's failures (5xx),
 * unless the server's `x-should-retry` says otherwise, either way.
 */
function shouldRetry(status: number, headers?: Headers): boolean {
  const header = headers?.get('x-should-retry');
  if (header === 'true' || header === 'false') return header === 'true';
  return status === 408 || status === 409 || status === 429 || status >= 500;
}

/** The code and the operator's hint for a provider's HTTP status. */
function statusCode(status: number): [string, string] {
  if (status === 401 || status === 403) return ['model_auth_failed', 'check the API key and its access to this model'];
  if (status === 404) return ['model_not_found', 'check the model name, and baseURL (which includes the API version path, such as /v1)'];
  if (status === 429) return ['model_rate_limited', 'the provider is rate limiting; retry later'];
  if (status >= 500) return ['model_unavailable', 'the provider failed; retry later'];
  return ['model_request_rejected', 'the provider refused the request'];
}

/**
 * Azure OpenAI's answer to a prompt its content filter caught: a 400 whose
 * `error.code` is `content_filter` (its `type` is null). The same prompt
 * would be refused again, as a refusal would.
 */
function promptFiltered(text: string): boolean {
  try {
    const json: unknown = JSON.parse(text);
    return isObject(json) && isObject(json['error']) && json['error']['code'] === 'content_filter';
  } catch {
    return false;
  }
}

/**
 * A 3xx. Not followed: fetch would send the key and the conversation to
 * wherever `Location` points, and accept that server's stream as the reply.
 * The message names where it pointed (origin and path; a query may hold a
 * token) so the operator can set baseURL there.
 */
export async function redirected(context: ProviderContext, response: Response): Promise<ModelProviderError> {
  await response.body?.cancel().catch(() => {});
  const status = response.status;
  const target = redirectTarget(response);
  const what = status === 0 ? 'a redirect' : `HTTP ${status}, a redirect${target === undefined ? '' : ` to ${target}`}`;
  return new ModelProviderError('model_redirect', redact(`${context.label}: provider answered ${what}; only redirects that keep the request (307, 308) on the same origin are followed, so the API key never goes on to another server: point baseURL at the server that answers`, context.secrets), {
    provider: context.provider,
    providerStatus: status === 0 ? undefined : status,
  });
}

/** A redirect's `Location` as origin and path, resolved against the request's URL. */
function redirectTarget(response: Response): string | undefined {
  const location = response.headers.get('location');
  if (location === null || !URL.canParse(location, response.url || undefined)) return undefined;
  const url = new URL(location, response.url || undefined);
  return `${url.origin}${url.pathname}`;
}

/** A 200 JSON that is no reply (see StreamDecoder.whole): an error as JSON, or a wrong baseURL's answer. */
export function notAStream(context: ProviderContext, status: number, text: string): ModelProviderError {
  const { message, type } = providerMessage(text.slice(0, MAX_ERROR_BODY));
  const what = message === undefined ? 'a body that is not an event stream' : `an error (${message})`;
  return new ModelProviderError('model_bad_response', redact(`${context.label}: provider answered ${what}; check baseURL points at a streaming API`, context.secrets), {
    provider: context.provider,
    providerStatus: status,
    providerType: type,
  });
}

/**
 * An error sent inside a stream that began with 200: Anthropic's
 * `event: error` (`{"type": "error", "error": {"type", "message"}}`), or an
 * OpenAI-compatible `data: {"error": {...}}`. One whose `code` is an HTTP
 * status (vLLM's and OpenRouter's `429`, LiteLLM's and Azure's `"429"`), or
 * whose `type` is one `typeStatus` names (Anthropic's `overloaded_error` is
 * its 529), is the failure that status would be as the answer's: the same
 * code and retry, so a client sees one code whether the provider failed
 * before the stream or in it.
 */
export function streamErrorEvent(context: ProviderContext, error: unknown, typeStatus?: ReadonlyMap<string, number>): ModelProviderError {
  const fields = isObject(error) ? error : { message: typeof error === 'string' ? error : undefined };
  const message = typeof fields['message'] === 'string' ? oneLine(fields['message']) : 'no message';
  const type = typeof fields['type'] === 'string' ? oneLine(fields['type']) : undefined;
  const code = fields['code'];
  const number = typeof code === 'number' ? code : typeof code === 'string' && /^\d{3}$/.test(code) ? Number(code) : undefined;
  const status = number !== undefined && number >= 400 && number <= 599 ? number : type === undefined ? undefined : typeStatus?.get(type);
  const retryable = (type !== undefined && RETRYABLE_TYPES.has(type)) || (status !== undefined && shouldRetry(status));
  const detail = `${type === undefined ? '' : `${type}: `}${message}`;
  return new ModelProviderError(status === undefined ? 'model_stream_error' : statusCode(status)[0], redact(`${context.label}: the provider sent an error in the stream (${detail})`, context.secrets), {
    provider: context.provider,
    providerStatus: status,
    providerType: type,
    retryable,
  });
}

export function connectionFailed(context: ProviderContext, cause: unknown): ModelProviderError {
  return new ModelProviderError('model_connection_failed', `${context.label}: could not reach the provider; check baseURL and the network`, {
    provider: context.provider,
    retryable: true,
    cause,
  });
}

/**
 * No TLS connection to the provider (see noTlsFix): its certificate was
 * refused, or an https baseURL points at a plain HTTP port (a local llama.cpp
 * or Ollama). Not "could not reach", and not retried: a retry is refused alike.
 */
export function noTls(context: ProviderContext, code: string, fix: string, cause: unknown): ModelProviderError {
  return new ModelProviderError('model_connection_failed', `${context.label}: no TLS connection to the provider (${code}); ${fix}`, {
    provider: context.provider,
    cause,
  });
}

/** The provider's server answered in something that is not HTTP (an undici parser code), or with headers too large for fetch. */
export function notHttp(context: ProviderContext, code: string, cause: unknown): ModelProviderError {
  return new ModelProviderError('model_bad_response', `${context.label}: the provider answered with something that is not HTTP or that fetch refuses (${code}); check baseURL points at the provider's HTTP API`, {
    provider: context.provider,
    cause,
  });
}

/**
 * A body that does not decode as its `Content-Encoding` says: zlib's `Z_DATA_ERROR`, or a brotli
 * format error. A proxy that labels a plain body gzip does so on every request, so a retry gets
 * the same. (A gzip body cut short is `Z_BUF_ERROR`: a cut stream, not this.)
 */
export function notDecodable(context: ProviderContext, code: string, cause: unknown): ModelProviderError {
  return new ModelProviderError('model_bad_response', `${context.label}: the provider's body does not decode as its Content-Encoding says (${code}); check the proxies between here and the provider`, {
    provider: context.provider,
    providerStatus: 200,
    cause,
  });
}

/** The stream ended before its last event (a cut connection, or a clean end too early). */
export function streamInterrupted(context: ProviderContext, cause?: unknown): ModelProviderError {
  return new ModelProviderError('model_stream_interrupted', `${context.label}: the stream ended before the provider finished it`, {
    provider: context.provider,
    retryable: true,
    cause,
  });
}

export function timeoutError(context: ProviderContext, seconds: number): ModelProviderError {
  return new ModelProviderError('model_timeout', `${context.label}: no answer from the provider for ${seconds} s; raise timeout or check the provider`, {
    provider: context.provider,
    status: 504,
  });
}

/**
 * Node's fetch (undici) gives up on its own after 300 s without response
 * headers, or between two body reads, whatever `timeout` says. Not retried:
 * a provider silent that long would cost another 300 s.
 */
export function fetchTimeoutError(context: ProviderContext, cause: unknown): ModelProviderError {
  return new ModelProviderError(
    'model_timeout',
    `${context.label}: no answer from the provider for 300 s, the limit of Node's own fetch (undici), which a timeout above 300 s cannot raise; pass a fetch bound to an undici Agent with longer headersTimeout and bodyTimeout to wait longer`,
    { provider: context.provider, status: 504, cause },
  );
}

/**
 * The model refused, or the provider's content filter cut its reply. Not
 * retried (the same request would be refused again), and the turn is not
 * stored: Anthropic asks that a refused exchange leave the context, or the
 * next turns are refused too.
 */
export function refused(context: ProviderContext, what: string): ModelProviderError {
  return new ModelProviderError('model_refused', redact(`${context.label}: ${what}; the turn is not kept, so the next one is sent without it`, context.secrets), {
    provider: context.provider,
    providerStatus: 200,
  });
}

/** The stream broke the provider's format. */
export function badResponse(context: ProviderContext, what: string, cause?: unknown): ModelProviderError {
  return new ModelProviderError('model_bad_response', `${context.label}: malformed stream from the provider (${what})`, {
    provider: context.provider,
    providerStatus: 200,
    cause,
  });
}

/** A reply past maxResponseSize: well-formed, maybe, but longer than this process keeps (see ProviderHTTPOptions). */
export function tooLong(context: ProviderContext & { maxResponseSize: number }): ModelProviderError {
  return new ModelProviderError('model_bad_response', `${context.label}: the provider's reply passed maxResponseSize (${context.maxResponseSize} bytes); raise maxResponseSize if replies this long are expected`, {
    provider: context.provider,
    providerStatus: 200,
  });
}

/** Parses one event's JSON data, or throws `model_bad_response`. */
export function parseData(context: ProviderContext, data: string): Record<string, unknown> {
  let json: unknown;
  try {
    json = JSON.parse(data);
  } catch (error) {
    throw badResponse(context, 'an event whose data is not JSON', error);
  }
  if (!isObject(json)) throw badResponse(context, 'an event whose data is not a JSON object');
  return json;
}

/**
 * Reads at most 64 KiB of an error body: an error page must not fill memory. A body that breaks
 * off or does not decode gives what was read: the status is the answer (a 429 stays a rate limit,
 * with its Retry-After), the body only says more.
 */
async function readLimited(response: Response): Promise<string> {
  if (response.body === null) return '';
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let text = '';
  try {
    while (text.length < MAX_ERROR_BODY) {
      const { done, value } = await reader.read();
      if (done) break;
      text += value;
    }
  } catch {
    // what was read is kept
  } finally {
    await reader.cancel().catch(() => {});
  }
  return text.slice(0, MAX_ERROR_BODY);
}
