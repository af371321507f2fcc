import { AgentRouterError } from '../errors.ts';
import type { Model, ModelChunk, ModelRequest } from '../models/model.ts';
import type { ChatMessage, TokenUsage, ToolCall } from '../types.ts';
import type { TurnEvent } from './turn.ts';

// What a chat turn's model step is asked, and how what the model yields becomes the turn's events.

const turnOfRequest = Symbol('agent-router.turnOfRequest');

/**
 * A request's `signal`, made only if the model reads it: one accessor shared by every request, own and
 * enumerable so a wrapping model's `{...request}` keeps it (BENCHMARKS.md, "What runs").
 */
const LAZY_SIGNAL: PropertyDescriptor = {
  get(this: { [turnOfRequest]: { readonly signal: AbortSignal } }): AbortSignal {
    return this[turnOfRequest].signal;
  },
  enumerable: true,
};

/** The model's request for one step. */
export function modelRequest(system: string | undefined, messages: ChatMessage[], turn: { readonly signal: AbortSignal }, tools: ModelRequest['tools']): ModelRequest {
  const request: Record<string | symbol, unknown> = { system, messages, [turnOfRequest]: turn };
  if (tools !== undefined) request['tools'] = tools;
  Object.defineProperty(request, 'signal', LAZY_SIGNAL);
  return request as unknown as ModelRequest;
}

/**
 * The latest `last` messages with the new one, starting at a user message:
 * a provider refuses a conversation that opens with a reply or with a tool
 * result cut from its call. Always a copy: a model that changes its request's array changes its own.
 */
export function window(history: readonly ChatMessage[], last: number | undefined, user: ChatMessage | undefined): ChatMessage[] {
  let start = 0;
  const total = history.length + (user === undefined ? 0 : 1);
  if (last !== undefined && total > last) {
    start = total - last;
    // Only a user message opens a window: never an assistant's tool calls or a tool result, which come in pairs.
    while (start < history.length && (history[start] as ChatMessage).role !== 'user') start++;
    // A resumed turn with no user message in the window: back to the one that opened the paused turn.
    if (user === undefined) while (start > 0 && (history[start] as ChatMessage | undefined)?.role !== 'user') start--;
  }
  // concat, not push: one copy, sized exactly (a pushed array keeps 16 spare slots for the stream's life).
  if (user === undefined) return history.slice(start);
  return (start === 0 ? history : history.slice(start)).concat([user]);
}

/** A model chunk that is not text as the turn's events: a tool call, or a record of usage, the cut-short mark, or both. */
export function eventsOf(model: Model, chunk: Exclude<ModelChunk, string>): TurnEvent[] {
  if (typeof chunk === 'object' && chunk !== null) {
    const { usage, truncated, toolCall } = chunk as { usage?: unknown; truncated?: unknown; toolCall?: unknown };
    const call = toolCall as Partial<ToolCall> | null | undefined;
    if (typeof call === 'object' && call !== null && typeof call.id === 'string' && typeof call.name === 'string' && typeof call.arguments === 'string') {
      return [{ type: 'tool.call', call: { id: call.id, name: call.name, arguments: call.arguments } }];
    }
    const events: TurnEvent[] = [];
    // `usage: null` is a provider's "none" (OpenAI's chunks carry it until the last): no usage, not `{}` in history.
    if (typeof usage === 'object' && usage !== null) events.push({ type: 'usage', usage: usage as TokenUsage });
    if (truncated === true) events.push({ type: 'truncated' });
    if (typeof usage === 'object' || typeof truncated === 'boolean') return events;
  }
  throw new AgentRouterError(
    500,
    'bad_model_chunk',
    `Model ${model.name} yielded a ${chunk === null ? 'null' : typeof chunk} chunk; chunks must be strings, {usage}, {truncated} or {toolCall: {id, name, arguments}}`,
  );
}
