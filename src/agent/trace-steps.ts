import type { Model, ModelRequest } from '../models/model.ts';
import { failSpan, linkUnder, modelTrace, SPAN_KIND, startSpan, type TraceLink, type TraceSpan } from '../lib/trace.ts';
import type { AssistantMessage, ToolCall } from '../types.ts';
import type { ToolOutcome } from './tools.ts';

/**
 * A model step's span (GenAI conventions: `chat {model}`, client kind), and the
 * request carrying its traceparent; with no tracer, the caller's traceparent only.
 */
export function modelSpan(link: TraceLink, model: Model, request: ModelRequest): TraceSpan | undefined {
  const carrier = request as unknown as { [modelTrace]?: TraceLink };
  if (link.tracer === undefined) {
    carrier[modelTrace] = link;
    return undefined;
  }
  // A model's name is `provider:model` (openai:gpt-4o-mini); a name without one is both.
  const colon = model.name.indexOf(':');
  const provider = colon === -1 ? model.name : model.name.slice(0, colon);
  const name = colon === -1 ? model.name : model.name.slice(colon + 1);
  const attributes = { 'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': provider, 'gen_ai.request.model': name };
  const span = startSpan(link, `chat ${name}`, SPAN_KIND.client, attributes);
  carrier[modelTrace] = linkUnder(link, span);
  return span;
}

/** Ends a model step's span: usage and finish reason, or the cut that ended the turn first. */
export function endModelSpan(span: TraceSpan, reply: { message: AssistantMessage; calls: ToolCall[] } | undefined, cut: unknown): void {
  if (reply === undefined) failSpan(span, cut);
  else {
    const usage = reply.message.usage;
    if (usage?.inputTokens !== undefined) span.setAttribute('gen_ai.usage.input_tokens', usage.inputTokens);
    if (usage?.outputTokens !== undefined) span.setAttribute('gen_ai.usage.output_tokens', usage.outputTokens);
    span.setAttribute('gen_ai.response.finish_reasons', [reply.message.truncated === true ? 'length' : reply.calls.length > 0 ? 'tool_calls' : 'stop']);
  }
  span.end();
}

/** Runs one tool call in its `execute_tool {name}` span; a tool's error outcome marks it failed with its code. */
export async function tracedTool(link: TraceLink, call: ToolCall, run: () => Promise<ToolOutcome>): Promise<ToolOutcome> {
  const attributes = { 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': call.name, 'gen_ai.tool.call.id': call.id };
  const span = startSpan(link, `execute_tool ${call.name}`, SPAN_KIND.internal, attributes);
  try {
    const outcome = await run();
    if (outcome.isError === true) failSpan(span, outcome.cause, outcome.error.code);
    return outcome;
  } catch (error) {
    failSpan(span, error);
    throw error;
  } finally {
    span.end();
  }
}
