import type { TurnEvent } from '../agent/turn.ts';
import type { ToolOutcome } from '../agent/tools.ts';
import type { Log, LogFields } from '../lib/logger.ts';
import type { JsonObject, ToolCall } from '../types.ts';
import { wireArguments } from '../agent/approvals.ts';

// One rule for a call's arguments on the wire, shared with the approvals list.
export { wireArguments };

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
export function logToolFailure(logger: Log, fields: LogFields, event: TurnEvent): void {
  if (event.type !== 'tool.result' || event.outcome.cause === undefined) return;
  logger.error(`AgentRouter: tool ${event.call.name} of agent ${JSON.stringify(fields.agentId)} failed`, event.outcome.cause, fields);
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
