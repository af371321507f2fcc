import { setModelTraceHeaders } from '../lib/trace.ts';
import { randomUUID } from 'node:crypto';
import { checkKnownOptions } from '../options.ts';
import type { ChatMessage, TokenUsage, ToolCall } from '../types.ts';
import type { Model, ModelChunk, ModelRequest } from './model.ts';
import { badResponse, parseData, refused, streamErrorEvent, streamInterrupted, type ProviderContext } from './provider-errors.ts';
import { count, headerSecrets, isObject } from './provider-reply.ts';
import { checkCommonOptions, DEFAULT_MAX_RESPONSE_SIZE, joinURL, streamFromProvider, type ProviderHTTPOptions, type StreamDecoder } from './provider-http.ts';

export interface OpenAIModelOptions extends ProviderHTTPOptions {
  /** The model name, e.g. `gpt-4o-mini`, or whatever the compatible server serves (`llama3.2`). */
  model: string;
  /** Sent as `Authorization: Bearer <apiKey>`; leave it out for local servers that need none. */
  apiKey?: string | undefined;
  /**
   * Any OpenAI-compatible Chat Completions API: Ollama `http://localhost:11434/v1`,
   * vLLM, llama.cpp server, Groq, DeepSeek, OpenRouter.
   * @defaultValue `https://api.openai.com/v1`
   */
  baseURL?: string | undefined;
}

/**
 * A model on any OpenAI-compatible Chat Completions endpoint, streamed
 * (`stream: true`, SSE `data: {json}` ... `data: [DONE]`) over `fetch`. The
 * system prompt goes first as a `system` message, then the history. Usage is
 * requested with `stream_options.include_usage` and yielded as `{usage}`.
 * Tools go as `tools: [{type: "function", function}]`; the streamed calls are
 * yielded whole, as `{toolCall}`, when the step finishes.
 *
 * @example openAIModel({ model: 'gpt-4o-mini', apiKey: process.env.OPENAI_API_KEY })
 * @example openAIModel({ model: 'llama3.2', baseURL: 'http://localhost:11434/v1' })
 */
/** Every option, for a misspelt one (`baseUrl` would send the conversation to api.openai.com instead). */
const OPENAI_OPTIONS: { readonly [K in keyof Required<OpenAIModelOptions>]: true } = {
  model: true, apiKey: true, baseURL: true, headers: true, timeout: true, maxRetries: true, maxResponseSize: true, body: true, fetch: true,
};

export function openAIModel(options: OpenAIModelOptions): Model {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError("openAIModel: pass an options object, e.g. openAIModel({ model: 'gpt-4o-mini', apiKey })");
  }
  checkKnownOptions(options, OPENAI_OPTIONS, 'openAIModel');
  checkCommonOptions('openAIModel', options);
  const model = options.model;
  // Trimmed, as a key read from a file ends with a line break (checked so in checkCommonOptions).
  const apiKey = options.apiKey?.trim();
  const url = joinURL(options.baseURL ?? 'https://api.openai.com/v1', 'chat/completions');
  const name = `openai:${model}`;
  const secrets = [...(apiKey === undefined ? [] : [apiKey]), ...headerSecrets(options.headers)];
  const context: ProviderContext = { provider: 'openai', label: name, secrets };

  return {
    name,
    stream(request: ModelRequest): AsyncIterable<ModelChunk> {
      const headers = new Headers({ 'content-type': 'application/json', accept: 'text/event-stream' });
      if (apiKey !== undefined && apiKey !== '') headers.set('authorization', `Bearer ${apiKey}`);
      for (const [key, value] of Object.entries(options.headers ?? {})) headers.set(key, value);
      setModelTraceHeaders(request, headers);
      const messages: Record<string, unknown>[] = request.system === undefined ? [] : [{ role: 'system', content: request.system }];
      for (const message of request.messages) messages.push(openAIMessage(message));
      // `body` may replace stream_options (`{ stream_options: undefined }` drops it: Mistral refuses the field).
      const body: Record<string, unknown> = { stream_options: { include_usage: true }, ...options.body, model, messages, stream: true };
      if (request.tools !== undefined && request.tools.length > 0) {
        body['tools'] = request.tools.map((tool) => ({ type: 'function', function: { name: tool.name, description: tool.description, parameters: tool.parameters } }));
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
        decoder: () => openAIDecoder(context),
      });
    },
  };
}

/**
 * Chat completion chunks: text in `choices[0].delta.content`, the end in
 * `finish_reason`, usage in a last chunk with empty `choices`, then `[DONE]`.
 * `finish_reason: "length"` (the reply hit `max_tokens`; Mistral's
 * `"model_length"`, the context's end) yields `{truncated: true}` at the
 * end. A refusal (`delta.refusal`) or `finish_reason: "content_filter"`
 * fails the turn as `model_refused`; Mistral's `"error"` and DeepSeek's
 * `"insufficient_system_resource"` as `model_stream_error`.
 * A stream that ends after a `finish_reason` but without `[DONE]` is complete
 * too (some compatible servers skip it). A whole `chat.completion` JSON from a
 * server that ignored `stream: true` is read as one chunk of it.
 */
function openAIDecoder(context: ProviderContext): StreamDecoder {
  let done = false;
  let finished = false;
  let truncated = false;
  let usage: TokenUsage | undefined;
  const calls = toolCallAssembler(context);
  return {
    get done() {
      return done;
    },
    event(event) {
      // Trimmed: hand-written compatible proxies send `data: [DONE] `, which OpenAI's SDKs take (they test its start).
      if (event.data.trim() === '[DONE]') {
        done = true;
        return [];
      }
      return read(parseData(context, event.data));
    },
    // A chat.completion, from a server that ignored `stream: true`: each choice holds a whole
    // `message` where a chunk's holds a `delta`, read the same way (refusal, finish_reason, usage).
    whole(completion) {
      const choices = Array.isArray(completion['choices']) ? completion['choices'] : [];
      if (!choices.some((choice) => isObject(choice) && isObject(choice['message']))) return undefined;
      done = true;
      return read({ ...completion, choices: choices.map((choice) => (isObject(choice) ? { ...choice, delta: choice['message'] } : choice)) });
    },
    // llama.cpp's server reports a failure mid-stream as a line `error: {json}`, not an event: ignored, as SSE would
    // have it, the turn would be stored cut short.
    field(name, value) {
      if (name !== 'error') return;
      let error: unknown = value === '' ? 'an error line with no message' : value.slice(0, 300);
      try {
        error = JSON.parse(value);
      } catch {
        // plain text: its start is the message
      }
      throw streamErrorEvent(context, isObject(error) && isObject(error['error']) ? error['error'] : error);
    },
    end() {
      if (!done && !finished) throw streamInterrupted(context);
      // Calls a server never closed with a finish_reason (some compatible servers end with [DONE] alone).
      const out: ModelChunk[] = calls.flush();
      if (usage !== undefined) out.push({ usage });
      if (truncated) out.push({ truncated: true });
      return out;
    },
  };

  /** One chunk's text; notes its finish_reason and usage. */
  function read(chunk: Record<string, unknown>): ModelChunk[] {
    // Only an error that is there: some servers send `"error": null` in every chunk (Foundry Local).
    const error = chunk['error'];
    if (isObject(error) || (typeof error === 'string' && error !== '')) throw streamErrorEvent(context, error);
    const out: ModelChunk[] = [];
    const choices = Array.isArray(chunk['choices']) ? chunk['choices'] : [];
    for (const choice of choices) {
      // With n > 1 other choices would interleave; the agent keeps one reply.
      if (!isObject(choice) || (choice['index'] !== undefined && choice['index'] !== 0)) continue;
      const delta = choice['delta'];
      const text = isObject(delta) ? contentText(delta['content']) : '';
      if (text !== '') out.push(text);
      if (isObject(delta) && Array.isArray(delta['tool_calls'])) calls.add(delta['tool_calls']);
      // A refusal comes as its own text, not as content: a reply of it would be stored as an empty one.
      if (isObject(delta) && typeof delta['refusal'] === 'string' && delta['refusal'] !== '') throw refused(context, 'the model refused (delta.refusal)');
      if (choice['finish_reason'] === 'content_filter') throw refused(context, "the provider's content filter stopped the reply (finish_reason content_filter)");
      // DeepSeek's: its inference resources ran out mid-reply. The reply is cut, not finished, and kept it would read as whole.
      if (choice['finish_reason'] === 'insufficient_system_resource') {
        throw streamErrorEvent(context, { type: 'insufficient_system_resource', message: 'the provider ran out of resources and stopped the reply (finish_reason insufficient_system_resource)' });
      }
      // Mistral's: the generation broke off with an error (OpenRouter's comes with an `error`, thrown above).
      if (choice['finish_reason'] === 'error') throw streamErrorEvent(context, { message: 'the provider stopped the reply with an error (finish_reason error)' });
      // Not an empty one: some servers (SenseNova, Hunyuan, Go gateways) send `"finish_reason": ""` in every
      // chunk, and a body they end mid-reply would be kept as a whole reply.
      if (typeof choice['finish_reason'] === 'string' && choice['finish_reason'] !== '') {
        finished = true;
        // "tool_calls" as a rule; a call closed by another reason (Ollama's "stop") is whole all the same.
        out.push(...calls.flush());
      }
      // The reply reached max_tokens, or the context's end (Mistral's model_length): stored all the same, marked as cut short.
      if (choice['finish_reason'] === 'length' || choice['finish_reason'] === 'model_length') truncated = true;
    }
    const reported = chunk['usage'];
    if (isObject(reported)) {
      usage = {
        inputTokens: count(reported['prompt_tokens']),
        outputTokens: count(reported['completion_tokens']),
        totalTokens: count(reported['total_tokens']),
      };
    }
    return out;
  }
}

/**
 * A delta's text. Mostly a string; Mistral's reasoning models (Magistral)
 * send a list of typed parts instead, `[{"type": "thinking", ...}]` then
 * `[{"type": "text", "text": "..."}]`: the text parts, in order, are the
 * reply; thinking and other parts are not.
 */
function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  let text = '';
  for (const part of content) if (isObject(part) && part['type'] === 'text' && typeof part['text'] === 'string') text += part['text'];
  return text;
}

/**
 * Streamed `delta.tool_calls` fragments joined into whole calls: the first
 * fragment of a call has its `index`, `id` and `function.name`, later ones
 * add pieces of `function.arguments` under the same index. A fragment with
 * a new id at a used index opens another call (Ollama numbers every call of
 * a step 0); one without an index (a whole call, as Gemini's compatible API
 * sends) is a call of its own.
 */
function toolCallAssembler(context: ProviderContext): { add(fragments: unknown[]): void; flush(): ModelChunk[] } {
  let open: Array<{ id: string; name: string; parts: string[] }> = [];
  const byIndex = new Map<unknown, { id: string; name: string; parts: string[] }>();
  return {
    add(fragments) {
      for (const fragment of fragments) {
        if (!isObject(fragment)) continue;
        const fn = isObject(fragment['function']) ? fragment['function'] : {};
        const id = typeof fragment['id'] === 'string' ? fragment['id'] : '';
        const index = typeof fragment['index'] === 'number' ? fragment['index'] : undefined;
        let call = index === undefined ? undefined : byIndex.get(index);
        if (call === undefined || (id !== '' && call.id !== '' && id !== call.id)) {
          call = { id, name: '', parts: [] };
          open.push(call);
          if (index !== undefined) byIndex.set(index, call);
        }
        if (call.id === '' && id !== '') call.id = id;
        if (call.name === '' && typeof fn['name'] === 'string') call.name = fn['name'];
        if (typeof fn['arguments'] === 'string') call.parts.push(fn['arguments']);
        // Some servers send the arguments as an object instead of JSON text (llama.cpp's older builds).
        else if (isObject(fn['arguments'])) call.parts.push(JSON.stringify(fn['arguments']));
      }
    },
    flush() {
      const out: ModelChunk[] = [];
      for (const call of open) {
        if (call.name === '') throw badResponse(context, 'a tool call without a function name');
        // Servers that give no id (some local ones) get one, so the result can still quote it.
        const toolCall: ToolCall = { id: call.id === '' ? `call_${randomUUID().replaceAll('-', '')}` : call.id, name: call.name, arguments: call.parts.join('') };
        out.push({ toolCall });
      }
      open = [];
      byIndex.clear();
      return out;
    },
  };
}

/**
 * One history message as Chat Completions takes it: an assistant's calls
 * as `tool_calls` (content null when the step had no text), a tool's
 * answer as a `tool` message quoting the call's id.
 */
function openAIMessage(message: ChatMessage): Record<string, unknown> {
  if (message.role === 'tool') return { role: 'tool', tool_call_id: message.toolCallId, content: message.content };
  if (message.role === 'assistant' && message.toolCalls !== undefined && message.toolCalls.length > 0) {
    return {
      role: 'assistant',
      content: message.content === '' ? null : message.content,
      tool_calls: message.toolCalls.map((call) => ({ id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } })),
    };
  }
  return { role: message.role, content: message.content };
}
