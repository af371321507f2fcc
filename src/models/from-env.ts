import { anthropicModel } from './anthropic.ts';
import type { Model } from './model.ts';
import { openAIModel } from './openai.ts';
import { isHeaderValue, isHttpURL } from './provider-http.ts';

/** Environment variables as `process.env` holds them. */
export type Env = Readonly<Record<string, string | undefined>>;

/** Used when the environment names a provider but no model. */
export const DEFAULT_OPENAI_MODEL = 'gpt-4o-mini';
export const DEFAULT_ANTHROPIC_MODEL = 'claude-haiku-4-5';

/**
 * Picks the model the environment asks for, as the demo server does:
 *
 * - `OPENAI_API_KEY` or `OPENAI_BASE_URL` set: `openAIModel` with
 *   `OPENAI_MODEL` (default `gpt-4o-mini`). A base URL alone is enough, for
 *   local servers that need no key (Ollama: `http://localhost:11434/v1`).
 * - else `ANTHROPIC_API_KEY` set: `anthropicModel` with `ANTHROPIC_MODEL`
 *   (default `claude-haiku-4-5`) and `ANTHROPIC_BASE_URL` if set, read as
 *   Anthropic's SDKs read it: the API's root, `/v1` added unless it ends so.
 * - else `fallback()` (the offline echo model in the CLI).
 *
 * Empty values count as unset. OpenAI wins when both keys are set.
 *
 * @param env where to read the variables; `process.env` by default
 * @param fallback builds the model used when no provider is configured
 * @example modelFromEnv(process.env, echoModel)
 */
export function modelFromEnv(env: Env = process.env, fallback?: () => Model): Model {
  const get = (name: string): string | undefined => {
    const value = env[name]?.trim();
    return value === undefined || value === '' ? undefined : value;
  };
  const openAIKey = checkKey('OPENAI_API_KEY', get('OPENAI_API_KEY'));
  const openAIBase = checkURL('OPENAI_BASE_URL', get('OPENAI_BASE_URL'));
  if (openAIKey !== undefined || openAIBase !== undefined) {
    return openAIModel({ model: get('OPENAI_MODEL') ?? DEFAULT_OPENAI_MODEL, apiKey: openAIKey, baseURL: openAIBase });
  }
  const anthropicKey = checkKey('ANTHROPIC_API_KEY', get('ANTHROPIC_API_KEY'));
  if (anthropicKey !== undefined) {
    return anthropicModel({
      model: get('ANTHROPIC_MODEL') ?? DEFAULT_ANTHROPIC_MODEL,
      apiKey: anthropicKey,
      baseURL: withV1(checkURL('ANTHROPIC_BASE_URL', get('ANTHROPIC_BASE_URL'))),
    });
  }
  if (fallback === undefined) {
    throw new TypeError(
      'modelFromEnv: set OPENAI_API_KEY, OPENAI_BASE_URL or ANTHROPIC_API_KEY, or pass a fallback, e.g. modelFromEnv(process.env, echoModel)',
    );
  }
  return fallback();
}

/** A key variable, refused by its name: a value fetch cannot send would fail every turn with a message quoting it. */
function checkKey(name: string, value: string | undefined): string | undefined {
  if (value === undefined || isHeaderValue(value)) return value;
  throw new TypeError(`modelFromEnv: ${name} holds a line break, a NUL or a character outside Latin-1 (a wrapped line, a pasted quote?); set it to the key alone, on one line`);
}

/** A base URL variable, refused by its name (not its value: a key pasted there must not reach a log). */
function checkURL(name: string, value: string | undefined): string | undefined {
  if (value === undefined || isHttpURL(value)) return value;
  throw new TypeError(`modelFromEnv: ${name} must be an absolute http(s) URL, e.g. ${name === 'OPENAI_BASE_URL' ? 'http://localhost:11434/v1' : 'https://api.anthropic.com'}`);
}

/**
 * Anthropic's SDKs (and the tools that share their variable) take
 * ANTHROPIC_BASE_URL as the API's root and add `/v1/messages`: a value set
 * for them (`https://api.anthropic.com`, a gateway's path) lacks the `/v1`
 * that `anthropicModel`'s baseURL includes.
 */
function withV1(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const url = new URL(value);
  const path = url.pathname.replace(/\/+$/, '');
  url.pathname = /\/v1$/i.test(path) ? path : `${path}/v1`;
  return url.href;
}
