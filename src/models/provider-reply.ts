/**
 * What a provider's reply says, read with care: an error's message and type
 * (on one line, cut short, keys cut out), its Retry-After, and the shapes of
 * its JSON. Provider text goes into logs and error messages.
 */

/**
 * The message and type of an error body. Both APIs nest them under `error`
 * (`{"error": {"message", "type"}}`); some compatible servers send a bare
 * string (`{"error": "model not found"}`), plain text or a web page.
 */
export function providerMessage(text: string): { message: string | undefined; type: string | undefined } {
  const { message, type } = readMessage(text);
  return { message: oneLine(message), type: oneLine(type) };
}

/**
 * `text` on one line, cut short: it goes into a log, where a provider's
 * line breaks (a traceback in its message) would read as lines of the log's own.
 */
export function oneLine<T extends string | undefined>(text: T): T {
  return (text === undefined ? text : text.replace(/\s+/g, ' ').trim().slice(0, MAX_MESSAGE)) as T;
}

const MAX_MESSAGE = 1000;

function readMessage(text: string): { message: string | undefined; type: string | undefined } {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    // An HTML error page (a proxy's, Cloudflare's 52x) opens with markup and styles; its title says what failed.
    // Looked for in the page's head only: the search would be quadratic over 64 KB of stray `<title`.
    const title = /<title[^>]*>([^<]*)<\/title>/i.exec(text.slice(0, 8192))?.[1]?.trim();
    const trimmed = (title || text.trim()).slice(0, 300);
    return { message: trimmed === '' ? undefined : trimmed, type: undefined };
  }
  // Google's APIs (Gemini's OpenAI-compatible endpoint) answer with a list of one error: `[{"error": {...}}]`.
  if (Array.isArray(json) && json.length > 0) json = json[0];
  const error = isObject(json) ? json['error'] : undefined;
  if (typeof error === 'string') return { message: error, type: undefined };
  if (!isObject(error)) return topLevelMessage(json);
  const message = typeof error['message'] === 'string' ? error['message'] : undefined;
  const type = typeof error['type'] === 'string' ? error['type'] : undefined;
  return { message: withUpstream(message, error['metadata']), type };
}

/**
 * OpenRouter's message for an upstream provider's failure is "Provider
 * returned error", the cause being in `metadata` (`provider_name`, `raw`,
 * the upstream's own error body): added, cut short, or the log says nothing.
 */
function withUpstream(message: string | undefined, metadata: unknown): string | undefined {
  if (!isObject(metadata) || metadata['raw'] === undefined || metadata['raw'] === null) return message;
  const raw = typeof metadata['raw'] === 'string' ? metadata['raw'] : JSON.stringify(metadata['raw']);
  const from = typeof metadata['provider_name'] === 'string' ? `${metadata['provider_name']}: ` : '';
  // Cut here, as it comes after the message; put on one line with the message by providerMessage.
  return `${message ?? 'no message'} (${from}${raw.trim().slice(0, 300)})`;
}

/**
 * Compatible servers that do not nest: `{"object": "error", "message", "type"}`
 * (Mistral, vLLM), `{"detail": ...}` (FastAPI servers), or AWS's
 * `{"Message"}` or `{"message"}`, the type in `__type` (Bedrock and the API
 * gateways in front of it).
 */
function topLevelMessage(json: unknown): { message: string | undefined; type: string | undefined } {
  if (!isObject(json)) return { message: undefined, type: undefined };
  const rawType = json['type'] ?? json['__type'];
  const type = typeof rawType === 'string' ? rawType : undefined;
  const message = json['message'] ?? json['Message'];
  if (typeof message === 'string') return { message, type };
  const detail = json['detail'];
  if (detail === undefined) return { message: undefined, type };
  return { message: typeof detail === 'string' ? detail : JSON.stringify(detail).slice(0, 300), type };
}

/** `Retry-After` (seconds or an HTTP date) or `retry-after-ms`, in seconds. */
export function parseRetryAfter(headers: Headers, now: number = Date.now()): number | undefined {
  // An empty retry-after-ms is no value (Number('') is 0): it must not override a valid Retry-After, as the SDKs' parseFloat would not.
  const msValue = headers.get('retry-after-ms')?.trim();
  const ms = msValue === undefined || msValue === '' ? Number.NaN : Number(msValue);
  if (Number.isFinite(ms) && ms >= 0) return ms / 1000;
  const value = headers.get('retry-after');
  if (value === null || value.trim() === '') return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return seconds >= 0 ? seconds : undefined;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, (date - now) / 1000);
}

/**
 * Cuts secrets out of a provider message. Providers echo the key they got,
 * often masked or cut ("Incorrect API key provided: sk-abc***xyz",
 * "gsk_LIVE0123...CRET"), and a message is cut to 300 characters before it
 * gets here, which can split a key. So a token goes when it shares any 8
 * characters in a row with a secret (case aside), or is the start of one,
 * or looks like a key (`sk-`, `gsk_`, `xai-`, `hf_`, `AIza`, 12 characters
 * or more), not only when it is the whole key. The part rules apply to keys
 * of 20 characters or more, as real ones are: a placeholder such as
 * llama.cpp's `sk-no-key-required` would otherwise cut "required" out of
 * every message. A key is cut out whole only from 8 characters on: no
 * provider issues shorter keys (theirs have 32 or more), while placeholders
 * (`k`, `EMPTY` in vLLM's docs, `ollama`) are, and cutting every occurrence
 * of those turned "blocks" into "bloc[redacted]s".
 */
export function redact(text: string, secrets: readonly string[]): string {
  const keys = secrets.filter((secret) => secret.length >= 20).map((secret) => secret.toLowerCase());
  const windows = new Set<string>();
  for (const key of keys) for (let i = 0; i + WINDOW <= key.length; i++) windows.add(key.slice(i, i + WINDOW));
  let out = text;
  for (const secret of secrets) if (secret.length >= MIN_SECRET) out = out.split(secret).join('[redacted]');
  return out.replace(TOKEN, (token) => {
    const lower = token.toLowerCase();
    // A short token counts when it is the start of a key: what the 300-character cut left of one.
    const keyStart = keys.some((key) => key.startsWith(lower));
    return (token.length >= 12 && KEY_LIKE.test(token)) || keyStart || sharesWindow(lower, windows) ? '[redacted]' : token;
  });
}

/**
 * The credentials in the caller's own `headers` (Azure's `api-key`, a
 * hand-set `Authorization: Bearer ...`, a gateway's `x-api-key` or
 * `X-Auth-Token`), to redact as the API key is: a provider echoes whichever
 * key it was sent. An auth header's scheme (`Bearer`) is not the secret:
 * kept as one, every "Bearer" in a message would be cut as a key's start.
 */
export function headerSecrets(headers: Readonly<Record<string, string>> | undefined): string[] {
  const secrets: string[] = [];
  for (const [name, value] of Object.entries(headers ?? {})) {
    const lower = name.toLowerCase();
    if (!CREDENTIAL_HEADERS.has(lower) && !/key|token|secret/.test(lower)) continue;
    const trimmed = value.trim();
    const credentials = /^(?:authorization|proxy-authorization)$/.test(lower) ? /^[!#$%&'*+.^`|~\w-]+\s+(.+)$/.exec(trimmed)?.[1] : undefined;
    secrets.push(credentials ?? trimmed);
  }
  return secrets;
}

const CREDENTIAL_HEADERS = new Set(['authorization', 'proxy-authorization', 'api-key', 'x-api-key']);

const WINDOW = 8;
/** Shorter "keys" are placeholders, not secrets (see redact). */
const MIN_SECRET = 8;
/** A run of characters a key or a masked key is made of. */
const TOKEN = /[\w*.~+/=-]{4,}/g;
const KEY_LIKE = /^(?:sk-|sk_|gsk_|xai-|hf_|AIza)/;

function sharesWindow(token: string, windows: ReadonlySet<string>): boolean {
  if (windows.size === 0) return false;
  for (let i = 0; i + WINDOW <= token.length; i++) if (windows.has(token.slice(i, i + WINDOW))) return true;
  return false;
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A non-negative finite number, or undefined: token counts as the provider reported them. */
export function count(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined;
}
