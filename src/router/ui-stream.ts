import type { ServerResponse } from 'node:http';
import { cancelledBy, chatTurn, type ChatSink } from '../agent/agent.ts';
import type { TurnEvent } from '../agent/turn.ts';
import type { TurnCancel } from '../lib/cancel.ts';
import { AgentRouterError, errorBody, httpErrors, statusOf, worthLogging } from '../errors.ts';
import { SSEWriter } from '../http/sse-writer.ts';
import type { Log } from '../lib/logger.ts';
import type { RelayedEvent } from '../transports/http-call.ts';
import type { JsonObject, ToolCall } from '../types.ts';
import { approvalList } from '../agent/approvals.ts';
import { startStream, type ReplySource, type StreamOptions, type StreamOwner } from './stream.ts';
import { requireMessage } from './payload.ts';
import { logToolFailure, toolCallPayload, toolResultPayload, wireArguments } from './tool-wire.ts';
import type { TurnLog } from './turn-log.ts';
import { finishReason, lastFrames, UIParts } from './ui-parts.ts';

/** The header by which the AI SDK's clients know its UI message stream protocol. */
export const UI_HEADERS: Readonly<Record<string, string>> = Object.freeze({ 'x-vercel-ai-ui-message-stream': 'v1' });

/**
 * Chat's message: `message`, or else the body the AI SDK's `DefaultChatTransport`
 * posts (`{id, messages: [UIMessage], trigger}`), whose last user message's
 * text parts are the turn's message; the history stays the agent's own.
 */
export function chatMessageOf(body: Record<string, unknown>): string {
  const message = body['message'];
  const messages = body['messages'];
  if (message === undefined && Array.isArray(messages)) {
    for (let i = messages.length - 1; i >= 0; i--) {
      const entry: unknown = messages[i];
      if (typeof entry !== 'object' || entry === null || (entry as { role?: unknown }).role !== 'user') continue;
      const text = textOf(entry as { parts?: unknown; content?: unknown });
      if (text !== '') return text;
      break;
    }
    throw httpErrors.badRequest('missing_message', 'Chat needs a non-empty "message" string, or "messages" whose last user message has text parts');
  }
  return requireMessage(body);
}

/** A UIMessage's text: its `text` parts joined (or an older client's `content` string). */
function textOf(entry: { parts?: unknown; content?: unknown }): string {
  if (!Array.isArray(entry.parts)) return typeof entry.content === 'string' ? entry.content : '';
  let text = '';
  for (const part of entry.parts as unknown[]) {
    const { type, text: piece } = (part ?? {}) as { type?: unknown; text?: unknown };
    if (type === 'text' && typeof piece === 'string') text += piece;
  }
  return text;
}

/**
 * Streams one chat reply in the AI SDK's UI message stream protocol, v1
 * (`?stream=ui`): `data:` lines of JSON parts (`start`, `start-step`,
 * `text-start`/`-delta`/`-end`, `tool-input-available`,
 * `tool-output-available`/`-error`, `finish-step`, `finish`, or `error`),
 * then `data: [DONE]`. Tools are dynamic tool parts: the client does not
 * know the agent's tools. The turn's events still reach its log for rejoins.
 */
export function streamUI(res: ServerResponse, agentId: string, source: ReplySource, options: StreamOptions, owner: StreamOwner): void {
  startStream(source, owner, () => new UIReplyStream(res, agentId, options, owner));
}

class UIReplyStream implements ChatSink {
  readonly #writer: SSEWriter;
  readonly #agentId: string;
  readonly #cancel: TurnCancel;
  readonly #logger: Log;
  readonly #owner: StreamOwner;
  readonly #log: TurnLog | undefined;
  readonly #keep: boolean;
  readonly #parts: UIParts;
  #text = '';
  /** What the stream ended with, if it failed: told to the owner at the end. */
  #failure: unknown;

  constructor(res: ServerResponse, agentId: string, { cancel, pingInterval, stallTimeout, logger, replays, keep, mirror }: StreamOptions, owner: StreamOwner) {
    this.#agentId = agentId;
    this.#log = owner.turnId === undefined ? undefined : replays?.open(owner.turnId, agentId);
    if (this.#log !== undefined && mirror !== undefined) this.#log.mirror = mirror(this.#log);
    this.#keep = keep === true;
    this.#cancel = cancel;
    this.#logger = logger;
    this.#owner = owner;
    this.#writer = new SSEWriter(res, { pingInterval, stallTimeout, headers: owner.headers === undefined ? UI_HEADERS : { ...owner.headers, ...UI_HEADERS } });
    this.#parts = new UIParts(this.#writer);
  }

  /** The calls the turn paused on, as the typed stream lists them (kept in the log for rejoins). */
  #paused: JsonObject[] | undefined;

  get open(): boolean {
    return this.#writer.open || this.#keep;
  }

  start(source: ReplySource): void {
    try {
      const turnId = this.#owner.turnId;
      this.#parts.start(turnId);
      if ('agent' in source) {
        source.agent[chatTurn](source.message, cancelledBy(this.#cancel, turnId), this, source.decisions);
        return;
      }
      this.#pull(source.chunks).then(
        () => (this.#cancel.aborted ? this.failed(this.#cancel.reason) : this.done()),
        (error: unknown) => this.failed(error),
      );
    } catch (error) {
      this.failed(error);
    }
  }

  async #pull(chunks: AsyncIterable<string | RelayedEvent>): Promise<void> {
    for await (const chunk of chunks) {
      if (!this.open) break;
      // A relayed remote event (only a typed remote stream has them) carries its payload as the typed stream's.
      const sending = typeof chunk === 'string' ? this.chunk(chunk) : this.#relay(chunk);
      if (sending !== undefined) await sending;
    }
  }

  #relay(event: RelayedEvent): Promise<void> | undefined {
    const payload = JSON.parse(event.data) as { id?: string; name?: string; arguments?: unknown; result?: unknown; error?: { message?: string } };
    if (event.event === 'tool.call') return this.#toolCall(String(payload.id), String(payload.name), payload.arguments, event);
    if (event.event === 'turn.paused') this.#paused = (payload as { pending_approvals?: JsonObject[] }).pending_approvals ?? [];
    if (event.event === 'tool.approval_required') this.#log?.tool(event);
    if (event.event !== 'tool.result') return undefined;
    return this.#toolResult(String(payload.id), payload.error === undefined ? { output: payload.result ?? null } : { errorText: payload.error.message ?? 'Tool failed' }, event);
  }

  event(event: TurnEvent): Promise<void> | undefined {
    if (event.type === 'text') return this.chunk(event.text);
    if (event.type === 'tool.call') {
      const data = JSON.stringify(toolCallPayload(event.call));
      return this.#toolCall(event.call.id, event.call.name, wireArguments(event.call.arguments), { event: 'tool.call', data });
    }
    // Logged only: its input part went out with the call, its output comes after POST .../approvals.
    if (event.type === 'tool.approval_required') this.#log?.tool({ event: event.type, data: JSON.stringify({ type: event.type, ...(approvalList([event.call])[0] as JsonObject) }) });
    if (event.type !== 'tool.result') return undefined;
    logToolFailure(this.#logger, this.#owner.fields, event);
    const { call, outcome } = event;
    const entry = { event: 'tool.result', data: JSON.stringify(toolResultPayload(call, outcome)) };
    return this.#toolResult(call.id, outcome.isError === true ? { errorText: outcome.error.message } : { output: outcome.result }, entry);
  }

  chunk(text: string): Promise<void> | undefined {
    this.#check();
    this.#log?.text(text);
    this.#text += text;
    return this.#parts.text(text);
  }

  #toolCall(toolCallId: string, toolName: string, input: unknown, entry: { event: string; data: string }): Promise<void> | undefined {
    this.#check();
    this.#log?.tool(entry);
    return this.#parts.toolCall(toolCallId, toolName, input);
  }

  #toolResult(toolCallId: string, result: { output: unknown } | { errorText: string }, entry: { event: string; data: string }): Promise<void> | undefined {
    this.#check();
    this.#log?.tool(entry);
    return this.#parts.toolResult(toolCallId, result);
  }

  /** The turn paused on calls that wait for a decision: their inputs were sent, their outputs come after POST .../approvals. */
  paused(pending: readonly ToolCall[]): void {
    this.#paused = approvalList(pending);
  }

  done(reply?: string, truncated = false): void {
    const text = reply ?? this.#text;
    const finished: JsonObject = truncated ? { agent_id: this.#agentId, text, truncated } : { agent_id: this.#agentId, text };
    if (this.#paused !== undefined) finished['pending_approvals'] = this.#paused;
    this.#log?.end({ finished });
    this.#parts.finishStep();
    this.#end({ type: 'finish', finishReason: finishReason(finished) });
  }

  failed(error: unknown): void {
    const cancel = this.#cancel;
    const cause = cancel.aborted ? cancel.reason : error;
    this.#failure = cause;
    if (worthLogging(cause)) this.#logger.error(`AgentRouter: stream for agent ${JSON.stringify(this.#agentId)} failed with ${statusOf(cause)}`, cause, this.#owner.fields);
    const body = errorBody(cause);
    this.#log?.end({ failed: body });
    // errorText is what useChat shows; the code rides along for a client that looks.
    this.#end({ type: 'error', errorText: body.error, code: body.code });
  }

  #check(): void {
    // A turn whose client is gone ends without committing.
    if (!this.open) throw new AgentRouterError(499, 'client_closed', 'Client closed the connection');
  }

  /** The last part and `[DONE]` in one write, once the turn's log is copied (see TurnLog.whenCopied); reports the end and never throws. */
  #end(part: Record<string, unknown>): void {
    if (this.#log === undefined) return this.#finish(part);
    this.#log.whenCopied(() => this.#finish(part));
  }

  #finish(part: Record<string, unknown>): void {
    try {
      this.#writer.end(lastFrames(part));
    } catch (error) {
      this.#logger.error(`AgentRouter: ending the stream for agent ${JSON.stringify(this.#agentId)} failed`, error, this.#owner.fields);
    }
    this.#owner.done(this.#failure);
  }
}
