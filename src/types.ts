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

/**
 * A call of a tool, as the model asked for it. `arguments` is the JSON text
 * the model wrote, unparsed: it may not parse, which the model is then told.
 */
export interface ToolCall {
  /** The provider's id for the call (OpenAI `call_...`, Anthropic `toolu_...`); its result quotes it. */
  id: string;
  name: string;
  arguments: string;
}

/** A tool as a model is told of it: `parameters` is a JSON Schema object (`type: "object"`). */
export interface ToolDefinition {
  name: string;
  description: string;
  parameters: JsonObject;
}

/** A message the user sent. */
export interface UserMessage {
  role: 'user';
  content: string;
  usage?: undefined;
  truncated?: undefined;
}

/** A reply of the model: its text, and the tools it called in that step, if any. */
export interface AssistantMessage {
  role: 'assistant';
  /** The text of the step; `''` when the model only called tools. */
  content: string;
  /** The calls the model made in this step, in order; each has a tool message after it. */
  toolCalls?: readonly ToolCall[] | undefined;
  /** Set when the provider reported usage. */
  usage?: TokenUsage | undefined;
  /**
   * Set on a reply the provider cut short at its token limit (OpenAI's
   * `finish_reason: "length"`, Anthropic's `stop_reason: "max_tokens"`) or
   * paused (Anthropic's `"pause_turn"`): the reply is stored, but it is not
   * the whole answer.
   */
  truncated?: true | undefined;
}

/** A tool's answer to one call: `content` is its result as text (JSON, or the string it returned), or the error's message. */
export interface ToolMessage {
  role: 'tool';
  /** The `id` of the call it answers. */
  toolCallId: string;
  /** The tool's name (Anthropic needs only the id; the name keeps history readable and OpenAI-compatible servers want it). */
  name: string;
  content: string;
  /** The call failed (bad arguments, a throw, refused): the model is told so. */
  isError?: true | undefined;
  usage?: undefined;
  truncated?: undefined;
}

/** One entry of an agent's history. */
export type ChatMessage = UserMessage | AssistantMessage | ToolMessage;

/** What a turn arriving at a busy agent does (`whenBusy`, `?when_busy=`). */
export const WHEN_BUSY = ['enqueue', 'reject', 'interrupt'] as const;
export type WhenBusy = (typeof WHEN_BUSY)[number];

/** What a turn does when its client leaves (`onDisconnect`, `?on_disconnect=`). */
export const ON_DISCONNECT = ['cancel', 'continue'] as const;
export type OnDisconnect = (typeof ON_DISCONNECT)[number];
