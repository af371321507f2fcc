/** JSON values as they travel on the wire and in storage. */
export type JsonPrimitive = string | number | boolean | null;
export type JsonValue = JsonPrimitive | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

/**
 * `T` if JSON holds it as it is, else `never` where it does not: primitives,
 * arrays (readonly too) and objects of such, interfaces included, which
 * {@link JsonObject}'s index signature would refuse. A Date, a function, a
 * Map or a BigInt is `never`, so a state type holding one does not compile.
 */
export type JsonCompatible<T> = T extends JsonPrimitive
  ? T
  : T extends readonly (infer E)[]
    ? readonly JsonCompatible<E>[]
    : T extends (...args: never[]) => unknown
      ? never
      : T extends object
        ? { [K in keyof T]: JsonCompatible<T[K]> }
        : never;

/**
 * The bound of an agent's state type, with {@link JsonObject} (the bound generic code written as
 * `S extends JsonObject` passes on): an object whose every field is {@link JsonCompatible}.
 */
export type JsonState<S> = { [K in keyof S]: JsonCompatible<S[K]> };

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
  /**
   * Set on an assistant message the provider cut short at its token limit
   * (OpenAI's `finish_reason: "length"`, Anthropic's `stop_reason:
   * "max_tokens"`) or paused (Anthropic's `"pause_turn"`): the reply is
   * stored, but it is not the whole answer.
   */
  truncated?: true | undefined;
}
