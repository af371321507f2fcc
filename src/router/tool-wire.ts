import type { TurnEvent } from '../agent/turn.ts';
import type { ToolOutcome } from '../agent/tools.ts';
import type { Logger } from '../lib/logger.ts';
import type { JsonObject, JsonValue, ToolCall } from '../types.ts';

/**
 * A call's arguments on the wire: the JSON object the model wrote, parsed;
 * the raw text as a string when it is not a JSON object (the model's mistake, shown as made).
 */
export function wireArguments(raw: string): JsonValue {
  if (raw.trim() === '') return {};
  try {
    const parsed: unknown = JSON.parse(raw);
    if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) return parsed as JsonObject;
  } catch {
    // not JSON: sent as written
  }
  return raw;
}

/** The typed stream's `tool.call` payload. */
export function toolCallPayload(call: ToolCall): JsonObject {
  return { type: 'tool.call', id: call.id, name: call.name, arguments: wireArguments(call.arguments) };
}

/** The typed stream's `tool.result` payload: `result`, or `error: {message, code}`. */
export function toolResultPayload(call: ToolCall, outcome: ToolOutcome): JsonObject {
  return outcome.isError === true
    ? { type: 'tool.result', id: call.id, name: call.name, error: { ...outcome.error } }
    : { type: 'tool.result', id: call.id, name: call.name, result: outcome.result };
}

/** What a tool threw, for the operator: the model and the client were told only what may be shown. */
export function logToolFailure(logger: Logger, agentId: string, event: TurnEvent): void {
  if (event.type !== 'tool.result' || event.outcome.cause === undefined) return;
  logger.error(`AgentRouter: tool ${event.call.name} of agent ${JSON.stringify(agentId)} failed`, event.outcome.cause);
}

/** The JSON chat reply's `tool_calls`, gathered from the turn's events in call order. */
export class ToolCallList {
  readonly #calls: JsonObject[] = [];

  add(event: TurnEvent): void {
    if (event.type !== 'tool.result') return;
    const { call, outcome } = event;
    const entry: JsonObject = { id: call.id, name: call.name, arguments: wireArguments(call.arguments) };
    if (outcome.isError === true) entry['error'] = { ...outcome.error };
    else entry['result'] = outcome.result;
    this.#calls.push(entry);
  }

  /** The list, or undefined when the turn called no tool (the reply then has no `tool_calls`). */
  get list(): JsonObject[] | undefined {
    return this.#calls.length === 0 ? undefined : this.#calls;
  }
}
