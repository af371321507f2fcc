/** JSON values as they travel on the wire and in storage. */
export type JsonPrimitive = string | number | boolean | null;
export type JsonValue = JsonPrimitive | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

/** Token counts a model provider reported for one reply. */
export interface TokenUsage {
  inputTokens?: number | undefined;
  outputTokens?: number | undefined;
  totalTokens?: number | undefined;
}

/** One entry of an agent's history. */
export interface ChatMessage {
  role: 'user' | 'assistant';
  content: string;
  /** Set on assistant messages when the provider reported usage. */
  usage?: TokenUsage | undefined;
}
