import { anthropicModel } from './anthropic.ts';
import type { Model } from './model.ts';
import { openAIModel } from './openai.ts';

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
 *   (default `claude-haiku-4-5`) and `ANTHROPIC_BASE_URL` if set.
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
  const openAIKey = get('OPENAI_API_KEY');
  const openAIBase = get('OPENAI_BASE_URL');
  if (openAIKey !== undefined || openAIBase !== undefined) {
    return openAIModel({ model: get('OPENAI_MODEL') ?? DEFAULT_OPENAI_MODEL, apiKey: openAIKey, baseURL: openAIBase });
  }
  const anthropicKey = get('ANTHROPIC_API_KEY');
  if (anthropicKey !== undefined) {
    return anthropicModel({
      model: get('ANTHROPIC_MODEL') ?? DEFAULT_ANTHROPIC_MODEL,
      apiKey: anthropicKey,
      baseURL: get('ANTHROPIC_BASE_URL'),
    });
  }
  if (fallback === undefined) {
    throw new TypeError(
      'modelFromEnv: set OPENAI_API_KEY, OPENAI_BASE_URL or ANTHROPIC_API_KEY, or pass a fallback, e.g. modelFromEnv(process.env, echoModel)',
    );
  }
  return fallback();
}
