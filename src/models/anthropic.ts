import { setModelTraceHeaders } from '../lib/trace.ts';
import { checkKnownOptions } from '../options.ts';
import type { ChatMessage } from '../types.ts';
import type { Model, ModelChunk, ModelRequest } from './model.ts';
import { badResponse, parseData, refused, streamErrorEvent, streamInterrupted, type ProviderContext } from './provider-errors.ts';
import { count, headerSecrets, isObject } from './provider-reply.ts';
import { checkCommonOptions, DEFAULT_MAX_RESPONSE_SIZE, joinURL, streamFromProvider, type ProviderHTTPOptions, type StreamDecoder } from './provider-http.ts';

/** The Messages API version this adapter speaks (sent as `anthropic-version`). */
export const ANTHROPIC_VERSION = '2023-06-01';

export interface AnthropicModelOptions extends ProviderHTTPOptions {
  /** The model name, e.g. `claude-sonnet-4-5`. */
  model: string;
  /** Sent as `x-api-key`. Required: typed optional so `process.env.ANTHROPIC_API_KEY` type-checks, and checked when the model is made. */
  apiKey: string | undefined;
  /** @defaultValue `https://api.anthropic.com/v1` */
  baseURL?: string | undefined;
  /**
   * The reply's token limit (`max_tokens`, which the API requires). `body: { max_tokens }` sets it too;
   * giving both throws. Raise it above a thinking `budget_tokens`, which it includes.
   * @defaultValue 4096
   */
  maxTokens?: number | undefined;
}

/**
 * A model on Anthropic's Messages API, streamed over `fetch`: the system
 * prompt is the top-level `system` field, the history is `messages`, text
 * arrives in `content_block_delta` events and usage in `message_start` and
 * `message_delta` (yielded once, as `{usage}`, at the end).
 *
 * @example anthropicModel({ model: 'claude-sonnet-4-5', apiKey: process.env.ANTHROPIC_API_KEY ?? '' })
 */
/** Every option, for a misspelt one (`max_tokens` would leave the reply at the default limit). */
const ANTHROPIC_OPTIONS: { readonly [K in keyof Required<AnthropicModelOptions>]: true } = {
  model: true, apiKey: true, baseURL: true, maxTokens: true, headers: true, timeout: true, maxRetries: true, maxResponseSize: true, body: true, fetch: true,
};

export function anthropicModel(options: AnthropicModelOptions): Model {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError("anthropicModel: pass an options object, e.g. anthropicModel({ model: 'claude-sonnet-4-5', apiKey })");
  }
  checkKnownOptions(options, ANTHROPIC_OPTIONS, 'anthropicModel');
  checkCommonOptions('anthropicModel', options);
  const model = options.model;
  // Trimmed, as a key read from a file ends with a line break (checked so in checkCommonOptions).
  const apiKey = options.apiKey?.trim();
  if (typeof apiKey !== 'string' || apiKey === '') {
    throw new TypeError('anthropicModel: pass apiKey, e.g. anthropicModel({ model, apiKey: process.env.ANTHROPIC_API_KEY })');
  }
  // `body: { max_tokens }` is the API's own spelling (a thinking budget's examples use it): either counts, and both at
  // once could only disagree, so they are refused rather than one quietly winning.
  const bodyMaxTokens = options.body?.['max_tokens'];
  if (options.maxTokens !== undefined && bodyMaxTokens !== undefined) {
    throw new TypeError('anthropicModel: pass maxTokens or body.max_tokens, not both; they set the same max_tokens field');
  }
  const maxTokens = options.maxTokens ?? (bodyMaxTokens === undefined ? 4096 : bodyMaxTokens);
  if (typeof maxTokens !== 'number' || !Number.isInteger(maxTokens) || maxTokens < 1) {
    const option = options.maxTokens === undefined ? 'body.max_tokens' : 'maxTokens';
    throw new TypeError(`anthropicModel: ${option} must be a whole number >= 1, e.g. maxTokens: 1024`);
  }
  const url = joinURL(options.baseURL ?? 'https://api.anthropic.com/v1', 'messages');
  const name = `anthropic:${model}`;
  const context: ProviderContext = { provider: 'anthropic', label: name, secrets: [apiKey, ...headerSecrets(options.headers)] };

  return {
    name,
    stream(request: ModelRequest): AsyncIterable<ModelChunk> {
      const headers = new Headers({
        'content-type': 'application/json',
        accept: 'text/event-stream',
        'x-api-key': apiKey,
        'anthropic-version': ANTHROPIC_VERSION,
      });
      for (const [key, value] of Object.entries(options.headers ?? {})) headers.set(key, value);
      setModelTraceHeaders(request, headers);
      const messages = anthropicMessages(request.messages);
      const body: Record<string, unknown> = { ...options.body, model, max_tokens: maxTokens, messages, stream: true };
      if (request.system !== undefined) body['system'] = request.system;
      if (request.tools !== undefined && request.tools.length > 0) {
        body['tools'] = request.tools.map((tool) => ({ name: tool.name, description: tool.description, input_schema: tool.parameters }));
      }
      return streamFromProvider({
        ...context,
        url,
        headers,
        body,
        timeout: options.timeout ?? 120,
        maxRetries: options.maxRetries ?? 2,
        maxResponseSize: options.maxResponseSize ?? DEFAULT_MAX_RESPONSE_SIZE,
        fetch: options.fetch ?? globalThis.fetch,
        signal: request.signal,
        decoder: () => anthropicDecoder(context),
      });
    },
  };
}

/**
 * The HTTP status of each error type Anthropic documents: an `event: error`
 * mid-stream gets the code and retry that status would (a 529's
 * `overloaded_error` is `model_unavailable`, retried before the first chunk).
 */
const ERROR_STATUS: ReadonlyMap<string, number> = new Map([
  ['invalid_request_error', 400],
  ['authentication_error', 401],
  ['billing_error', 402],
  ['permission_error', 403],
  ['not_found_error', 404],
  ['request_too_large', 413],
  ['rate_limit_error', 429],
  ['api_error', 500],
  ['timeout_error', 504],
  ['overloaded_error', 529],
]);

/** Stop reasons of a reply that is not whole. `tool_use` is not one: the step ends with its calls, and the turn goes on with their results. */
const TRUNCATED = new Set(['max_tokens', 'model_context_window_exceeded', 'pause_turn']);

/**
 * Named events: `message_start` (input usage), `content_block_delta` with a
 * `text_delta`, `message_delta` (cumulative output usage; `stop_reason:
 * "refusal"` fails the turn as `model_refused`; `"max_tokens"`,
 * `"model_context_window_exceeded"` and `"pause_turn"` yield `{truncated: true}` at the end),
 * `message_stop` (a clean end after a stop_reason without it is whole too),
 * `ping`, `error`; a `tool_use` block (`content_block_start`, its
 * `input_json_delta` pieces, `content_block_stop`) is yielded whole as
 * `{toolCall}` when it stops. Other events and delta types (thinking, server tools) are
 * skipped, as the API's versioning policy asks of clients. A whole message
 * JSON from a gateway that ignored `stream: true` is read the same way.
 */
function anthropicDecoder(context: ProviderContext): StreamDecoder {
  let done = false;
  // tool_use blocks by index, from content_block_start to content_block_stop: the input arrives as pieces of JSON text.
  const calls = new Map<unknown, { id: string; name: string; parts: string[]; start: string }>();
  // Whole once message_delta carried its stop_reason: a clean end without message_stop (some gateways drop it) is
  // accepted, as Anthropic's SDKs do, and as an OpenAI stream ending after finish_reason without [DONE] is.
  let stopped = false;
  // Each usage field is cumulative and optional in every event (the SDKs update each alone): one left out keeps its last value.
  let fresh: number | undefined;
  let cacheWrite = 0;
  let cacheRead = 0;
  let output: number | undefined;
  let truncated = false;
  return {
    get done() {
      return done;
    },
    event(event) {
      const data = parseData(context, event.data);
      const type = event.event === 'message' ? data['type'] : event.event;
      switch (type) {
        case 'message_start': {
          const message = data['message'];
          if (isObject(message)) readUsage(message['usage']);
          return [];
        }
        case 'content_block_start': {
          const block = data['content_block'];
          if (!isObject(block) || block['type'] !== 'tool_use') return [];
          if (typeof block['id'] !== 'string' || typeof block['name'] !== 'string') throw badResponse(context, 'a tool_use block without its id or name');
          // The input starts as {} and fills from input_json_delta; a gateway may send it whole here instead.
          const input = block['input'];
          const start = isObject(input) && Object.keys(input).length > 0 ? JSON.stringify(input) : '';
          calls.set(data['index'], { id: block['id'], name: block['name'], parts: [], start });
          return [];
        }
        case 'content_block_delta': {
          const delta = data['delta'];
          if (isObject(delta) && delta['type'] === 'text_delta' && typeof delta['text'] === 'string' && delta['text'] !== '') {
            return [delta['text']];
          }
          if (isObject(delta) && delta['type'] === 'input_json_delta' && typeof delta['partial_json'] === 'string') calls.get(data['index'])?.parts.push(delta['partial_json']);
          return [];
        }
        case 'content_block_stop': {
          const call = calls.get(data['index']);
          if (call === undefined) return [];
          calls.delete(data['index']);
          return [toolCallChunk(call)];
        }
        case 'message_delta': {
          readUsage(data['usage']);
          const delta = data['delta'];
          if (isObject(delta)) stopReason(delta['stop_reason']);
          return [];
        }
        case 'message_stop':
          done = true;
          return [];
        case 'error':
          throw streamErrorEvent(context, data['error'], ERROR_STATUS);
        default: {
          // A proxy's error in the OpenAI form, `data: {"error": {...}}` with no type (LiteLLM's /v1/messages):
          // skipped, its message was lost and the stream's end retried as a cut one, a 400 too.
          const error = data['error'];
          if (type === undefined && (isObject(error) || (typeof error === 'string' && error !== ''))) throw streamErrorEvent(context, error, ERROR_STATUS);
          return []; // ping, and event types added later
        }
      }
    },
    // A whole message, from a gateway that ignored `stream: true`: its text blocks are the reply.
    whole(message) {
      if (message['type'] !== 'message' || !Array.isArray(message['content'])) return undefined;
      readUsage(message['usage']);
      stopReason(message['stop_reason']);
      done = true;
      const out: ModelChunk[] = [];
      for (const block of message['content']) {
        if (isObject(block) && block['type'] === 'text' && typeof block['text'] === 'string' && block['text'] !== '') out.push(block['text']);
        if (isObject(block) && block['type'] === 'tool_use' && typeof block['id'] === 'string' && typeof block['name'] === 'string') {
          out.push({ toolCall: { id: block['id'], name: block['name'], arguments: JSON.stringify(isObject(block['input']) ? block['input'] : {}) } });
        }
      }
      return out;
    },
    end() {
      if (!done && !stopped) throw streamInterrupted(context);
      // A block a gateway never closed: its input is all there is once the message has stopped.
      const out: ModelChunk[] = [...calls.values()].map(toolCallChunk);
      calls.clear();
      const input = fresh === undefined ? undefined : fresh + cacheWrite + cacheRead;
      if (input !== undefined || output !== undefined) {
        const total = input === undefined || output === undefined ? undefined : input + output;
        out.push({ usage: { inputTokens: input, outputTokens: output, totalTokens: total } });
      }
      if (truncated) out.push({ truncated: true });
      return out;
    },
  };

  /** A refusal fails the turn; a reply cut short is marked. */
  function stopReason(reason: unknown): void {
    if (typeof reason === 'string' && reason !== '') stopped = true;
    // The API's refusals: the text so far is not an answer, and kept in the context it gets the next turns refused too.
    if (reason === 'refusal') throw refused(context, 'the model refused (stop_reason refusal)');
    // The reply reached max_tokens, or the model's context window, or the API paused a long server-tool turn
    // (pause_turn: the reply goes on only if sent back as is, which this adapter does not do): stored all the same, marked as cut short.
    if (TRUNCATED.has(String(reason))) truncated = true;
  }

  /**
   * Input counts cached tokens too (the API reports them apart). Every count is cumulative, so the
   * last one reported wins, field by field: a message_delta with input_tokens alone keeps the cache
   * counts of message_start.
   */
  function readUsage(usage: unknown): void {
    if (!isObject(usage)) return;
    fresh = count(usage['input_tokens']) ?? fresh;
    cacheWrite = count(usage['cache_creation_input_tokens']) ?? cacheWrite;
    cacheRead = count(usage['cache_read_input_tokens']) ?? cacheRead;
    output = count(usage['output_tokens']) ?? output;
  }
}

/** A whole tool_use block as a call; a tool without parameters streams no input at all, which is `{}`. */
function toolCallChunk(call: { id: string; name: string; parts: string[]; start: string }): ModelChunk {
  const text = call.parts.join('');
  return { toolCall: { id: call.id, name: call.name, arguments: text !== '' ? text : call.start !== '' ? call.start : '{}' } };
}

/**
 * History as the Messages API takes it. An assistant's calls are `tool_use`
 * blocks after its text; tool answers are `tool_result` blocks in a user
 * message, one message for all the answers of a step, as the API requires.
 * The API refuses an empty or whitespace-only text message anywhere but
 * last ("text content blocks must contain non-whitespace text"): a reply that
 * came back so (say "\n\n" before a stop sequence), kept in history, would
 * make every later turn fail. Those are left out; the API merges the
 * consecutive same-role turns that leaves. So are the assistant turns that
 * would then open the conversation: Bedrock and older API versions refuse a
 * first message that is not the user's.
 */
function anthropicMessages(all: readonly ChatMessage[]): Record<string, unknown>[] {
  const last = all.length - 1;
  const kept = all.filter((message, index) => message.role === 'tool' || hasCalls(message) || message.content.trim() !== '' || index === last);
  const first = kept.findIndex((message) => message.role === 'user');
  const out: Record<string, unknown>[] = [];
  let results: Record<string, unknown>[] | undefined;
  for (const message of first > 0 ? kept.slice(first) : kept) {
    if (message.role === 'tool') {
      const block: Record<string, unknown> = { type: 'tool_result', tool_use_id: message.toolCallId };
      // An empty content is left out rather than sent as "", which the API refuses in a text block.
      if (message.content !== '') block['content'] = message.content;
      if (message.isError === true) block['is_error'] = true;
      if (results !== undefined) results.push(block);
      else out.push({ role: 'user', content: (results = [block]) });
      continue;
    }
    results = undefined;
    if (message.role === 'assistant' && hasCalls(message)) {
      const content: Record<string, unknown>[] = message.content.trim() === '' ? [] : [{ type: 'text', text: message.content }];
      for (const call of message.toolCalls ?? []) content.push({ type: 'tool_use', id: call.id, name: call.name, input: inputOf(call.arguments) });
      out.push({ role: 'assistant', content });
    } else {
      out.push({ role: message.role, content: message.content });
    }
  }
  return out;
}

function hasCalls(message: ChatMessage): boolean {
  return message.role === 'assistant' && message.toolCalls !== undefined && message.toolCalls.length > 0;
}

/** The API takes a call's input as an object: arguments that did not parse (the model was told so) are sent as {}. */
function inputOf(text: string): Record<string, unknown> {
  try {
    const input: unknown = JSON.parse(text);
    return isObject(input) ? input : {};
  } catch {
    return {};
  }
}
