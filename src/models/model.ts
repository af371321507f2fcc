import type { ChatMessage, TokenUsage, ToolCall, ToolDefinition } from '../types.ts';

/** What an agent hands its model for one turn. */
export interface ModelRequest {
  /** The agent's system prompt, if it has one. */
  system: string | undefined;
  /** The agent's history followed by the new user message (last): an array of this request's own, of frozen messages. */
  messages: readonly ChatMessage[];
  /** Aborted when the client disconnects, the turn times out or the server shuts down. */
  signal: AbortSignal;
  /** The tools the model may call, when the agent has any; a model that cannot call tools ignores them. */
  tools?: readonly ToolDefinition[] | undefined;
}

/**
 * A model yields text chunks. It may also yield one `{usage}` record (token
 * counts reported by a provider), which the agent keeps with the reply, and
 * `{truncated: true}` when the provider stopped the reply at its token limit
 * (or paused it: Anthropic's `pause_turn`), which the agent marks the reply with (`truncated` in history and in the
 * router's replies); one record may carry both. A model given `tools` may
 * yield `{toolCall}` records, one per whole call (arguments complete), after
 * the step's text; the agent runs them and asks the model again.
 */
export type ModelChunk =
  | string
  | { usage: TokenUsage; truncated?: boolean | undefined }
  | { truncated: boolean; usage?: TokenUsage | undefined }
  | { toolCall: ToolCall };

/** The only contract a model has to meet: stream a reply to a request. */
export interface Model {
  /** A short name for logs and errors, e.g. `openai:gpt-4o-mini`. */
  readonly name: string;
  stream(request: ModelRequest): AsyncIterable<ModelChunk>;
}
