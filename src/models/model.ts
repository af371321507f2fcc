import type { ChatMessage, TokenUsage } from '../types.ts';

/** What an agent hands its model for one turn. */
export interface ModelRequest {
  /** The agent's system prompt, if it has one. */
  system: string | undefined;
  /** The agent's history followed by the new user message (last): an array of this request's own, of frozen messages. */
  messages: readonly ChatMessage[];
  /** Aborted when the client disconnects, the turn times out or the server shuts down. */
  signal: AbortSignal;
}

/**
 * A model yields text chunks. It may also yield one `{usage}` record (token
 * counts reported by a provider), which the agent keeps with the reply, and
 * `{truncated: true}` when the provider stopped the reply at its token limit
 * (or paused it: Anthropic's `pause_turn`), which the agent marks the reply with (`truncated` in history and in the
 * router's replies); one record may carry both.
 */
export type ModelChunk = string | { usage: TokenUsage; truncated?: boolean | undefined } | { truncated: boolean; usage?: TokenUsage | undefined };

/** The only contract a model has to meet: stream a reply to a request. */
export interface Model {
  /** A short name for logs and errors, e.g. `openai:gpt-4o-mini`. */
  readonly name: string;
  stream(request: ModelRequest): AsyncIterable<ModelChunk>;
}
