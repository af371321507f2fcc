import { AgentRouterError } from '../errors.ts';
import type { ChatMessage, JsonObject, ToolCall, ToolMessage } from '../types.ts';
import type { ToolOutcome } from './tools.ts';

/** A person's decision on one paused call. */
export interface ApprovalDecision {
  /** The call's id, from `pendingApprovals`. */
  id: string;
  approved: boolean;
  /** Why it was refused; the model is told. */
  reason?: string | undefined;
}

/**
 * The calls a paused turn waits on, read from committed history: the last
 * assistant message's calls that no tool message after it answers. Kept in
 * history itself, so any process (or this one after a restart) can resume, on any storage.
 */
export function pendingCalls(history: readonly ChatMessage[]): ToolCall[] {
  let at = history.length - 1;
  while (at >= 0 && (history[at] as ChatMessage).role === 'tool') at--;
  const step = history[at];
  if (step === undefined || step.role !== 'assistant' || step.toolCalls === undefined) return [];
  const answered = new Set<string>();
  for (let i = at + 1; i < history.length; i++) answered.add((history[i] as ToolMessage).toolCallId);
  return step.toolCalls.filter((call) => !answered.has(call.id));
}

/** A body's `decisions`, checked for shape only (400); what is pending is checked inside the turn. */
export function parseDecisions(decisions: unknown): ApprovalDecision[] {
  if (!Array.isArray(decisions) || decisions.length === 0) {
    throw badDecisions('"decisions" must be a non-empty array, e.g. {"decisions": [{"id": "call_1", "approved": true}]}');
  }
  return decisions.map((decision: unknown) => {
    const { id, approved, reason } = (typeof decision === 'object' && decision !== null ? decision : {}) as Partial<ApprovalDecision>;
    if (typeof id !== 'string' || id === '' || typeof approved !== 'boolean' || (reason !== undefined && reason !== null && typeof reason !== 'string')) {
      throw badDecisions('each decision is {"id": string, "approved": true|false, "reason"?: string}');
    }
    return typeof reason === 'string' ? { id, approved, reason } : { id, approved };
  });
}

/** The decisions against what is pending: 409 when nothing is, 404 for an unknown id, 400 when one is missing or given twice. */
export function checkDecisions(agentId: string, pending: readonly ToolCall[], decisions: readonly ApprovalDecision[]): Map<string, ApprovalDecision> {
  if (pending.length === 0) throw new AgentRouterError(409, 'no_pending_approval', `Agent ${JSON.stringify(agentId)} has no tool call waiting for approval`);
  const byId = new Map<string, ApprovalDecision>();
  for (const decision of decisions) {
    if (!pending.some((call) => call.id === decision.id)) {
      throw new AgentRouterError(404, 'unknown_tool_call', `No pending tool call has the id ${JSON.stringify(decision.id.slice(0, 100))}; the pending ones are ${pending.map((c) => c.id).join(', ')}`, {
        extra: { pending_approvals: approvalList(pending) },
      });
    }
    if (byId.has(decision.id)) throw badDecisions(`two decisions for ${decision.id}`);
    byId.set(decision.id, decision);
  }
  const missing = pending.filter((call) => !byId.has(call.id));
  if (missing.length > 0) throw badDecisions(`a decision is needed for every pending call; missing: ${missing.map((c) => c.id).join(', ')}`);
  return byId;
}

/** What the model is told of a refused call. */
export function refusal(call: ToolCall, reason: string | undefined): ToolOutcome {
  const why = reason === undefined || reason.trim() === '' ? '' : `: ${reason}`;
  return { isError: true, error: { message: `A person refused the call of ${call.name}; it did not run${why}`, code: 'tool_refused' } };
}

/** A chat while calls wait for approval: the conversation cannot go on until they are decided. */
export function approvalPending(agentId: string, pending: readonly ToolCall[]): AgentRouterError {
  return new AgentRouterError(
    409,
    'approval_pending',
    `Agent ${JSON.stringify(agentId)} waits for a decision on ${pending.map((c) => `${c.name} (${c.id})`).join(', ')}; send them to its approvals first`,
    { extra: { pending_approvals: approvalList(pending) } },
  );
}

/** The wire's `pending_approvals`: arguments as the JSON object the model wrote (its raw text when not one). */
export function approvalList(pending: readonly ToolCall[]): JsonObject[] {
  return pending.map((call) => ({ id: call.id, name: call.name, arguments: wireArguments(call.arguments) }));
}

/** A call's arguments on the wire: the JSON object the model wrote, parsed; the raw text when it is not one. */
export function wireArguments(raw: string): JsonObject | string {
  if (raw.trim() === '') return {};
  try {
    const parsed: unknown = JSON.parse(raw);
    if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) return parsed as JsonObject;
  } catch {
    // not JSON: sent as written
  }
  return raw;
}

function badDecisions(message: string): AgentRouterError {
  return new AgentRouterError(400, 'invalid_decisions', message);
}
