import type { ServerResponse } from 'node:http';
import { cancelledBy, chatTurn, type Agent, type ChatSink } from '../agent/agent.ts';
import type { TurnEvent } from '../agent/turn.ts';
import type { TurnCancel } from '../lib/cancel.ts';
import { AgentRouterError, errorBody, statusOf, worthLogging } from '../errors.ts';
import { formatEvent } from '../sse/format.ts';
import { ChunkSeam } from '../sse/seams.ts';
import { SSEWriter } from '../http/sse-writer.ts';
import type { ChunkStream } from '../transports/transport.ts';
import type { TypedChunkStream } from '../transports/http.ts';
import type { RelayedEvent } from '../transports/http-call.ts';
import type { Log, LogFields } from '../lib/logger.ts';
import { logToolFailure, toolCallPayload, toolResultPayload } from './tool-wire.ts';
import { approvalList } from '../agent/approvals.ts';
import type { ApprovalDecision } from '../agent/approvals.ts';
import type { JsonObject, ToolCall } from '../types.ts';
import type { TurnLog, TurnLogs } from './turn-log.ts';

/** Where a streamed reply comes from: chunks to pull, or a local agent's turn, which pushes them into the stream. */
export type ReplySource = { chunks: AsyncIterable<string> | ChunkStream | TypedChunkStream } | { agent: Agent<any>; message: string; decisions?: readonly ApprovalDecision[] | undefined };

/** How one reply is streamed. */
export interface StreamOptions {
  /** The typed event stream (`stream=events`) rather than plain `data:` chunks. */
  typed: boolean;
  /** The request's cancel: an aborted turn ends the stream with its reason. */
  cancel: TurnCancel;
  pingInterval: number | undefined;
  /** Seconds a client may leave the stream unread before it is cut (see SSEWriterOptions). */
  stallTimeout: number;
  logger: Log;
  /** Where a turn's events are kept for rejoins. */
  replays?: TurnLogs | undefined;
  /** onDisconnect 'continue': the turn goes on once the client is gone (its events still reach the log). */
  keep?: boolean | undefined;
  /** Copies the turn's log where other processes read it (a shared storage's TurnChannel). */
  mirror?: ((log: TurnLog) => TurnLog['mirror']) | undefined;
}

/**
 * Where a stream reports its end: `done` once it answered, however it ended (with what it failed with, if it did);
 * `fail` when it never began and a JSON status still answers.
 */
export interface StreamOwner {
  /** The turn's id (a remote's, once it answered): in `turn.started`, and with seq in every event's `id:`. */
  readonly turnId?: string | undefined;
  /** The request's own headers (`x-request-id`, `Turn-Id`), written with the stream's head. */
  readonly headers?: Readonly<Record<string, string>> | undefined;
  /** What the stream's log records say of the request. */
  readonly fields: LogFields;
  done(failure?: unknown): void;
  fail(error: unknown): void;
}

/**
 * Streams one chat reply as SSE (docs/reference/http-api.md, "Streaming"): one event per chunk,
 * then `event: done` + `data: [DONE]`; a failure after the stream began ends
 * it with `event: error`. With `typed`, frames are the typed event stream
 * (`turn.started`, `text.delta`, `turn.finished` / `turn.failed`), each
 * payload carrying its own `type`. Tells `owner` once, and never throws.
 *
 * A remote stream is awaited (`ready`) before the SSE headers go out, so a
 * remote 404 or 502 is still answered as a JSON status.
 *
 * No promise is kept for the stream's life: a held stream is this module's
 * one object (plus its writer) and what the turn itself holds.
 */
export function streamReply(res: ServerResponse, agentId: string, source: ReplySource, options: StreamOptions, owner: StreamOwner): void {
  startStream(source, owner, () => new ReplyStream(res, agentId, options, owner));
}

/**
 * Starts the stream `make` writes, once its source is ready: a remote's is
 * awaited first, so its 404 or 502 is still answered as a JSON status.
 */
export function startStream(source: ReplySource, owner: StreamOwner, make: () => { start(source: ReplySource): void }): void {
  const begin = (): void => {
    let stream: { start(source: ReplySource): void };
    try {
      stream = make();
    } catch (error) {
      return owner.fail(error); // nothing was written (the headers could not be set)
    }
    stream.start(source);
  };
  if ('chunks' in source && 'ready' in source.chunks) source.chunks.ready.then(begin, (error: unknown) => owner.fail(error));
  else begin();
}

/** One reply on its way out: the turn's sink, so the turn calls it directly (see Agent's ChatSink). */
class ReplyStream implements ChatSink {
  readonly #writer: SSEWriter;
  readonly #agentId: string;
  readonly #typed: boolean;
  readonly #cancel: TurnCancel;
  readonly #logger: Log;
  readonly #owner: StreamOwner;
  readonly #turnId: string | undefined;
  /** The turn's events for rejoins: entry k is the event of seq k (k + 1 typed); see TurnLog. */
  readonly #log: TurnLog | undefined;
  readonly #keep: boolean;
  /** The reply so far (the typed stream's `turn.finished` carries it). */
  #text = '';
  /** The plain stream's watch on a pair or a CRLF split between chunks; made by the first chunk that splits one. */
  #seam: ChunkSeam | undefined;
  /** The turn's events so far (text, then its end): an event's `id:` seq, plus one in the typed stream, whose turn.started is 1. */
  #seq = 0;
  /** The turn paused: the typed stream ends with `turn.paused` and this list. */
  #paused: JsonObject[] | undefined;
  /** What the stream ended with, if it failed: told to the owner at the end. */
  #failure: unknown;

  constructor(res: ServerResponse, agentId: string, { typed, cancel, pingInterval, stallTimeout, logger, replays, keep, mirror }: StreamOptions, owner: StreamOwner) {
    this.#agentId = agentId;
    this.#turnId = owner.turnId;
    this.#log = owner.turnId === undefined ? undefined : replays?.open(owner.turnId, agentId);
    if (this.#log !== undefined && mirror !== undefined) this.#log.mirror = mirror(this.#log);
    this.#keep = keep === true;
    this.#typed = typed;
    this.#cancel = cancel;
    this.#logger = logger;
    this.#owner = owner;
    this.#writer = new SSEWriter(res, { pingInterval, stallTimeout, headers: owner.headers });
  }

  start(source: ReplySource): void {
    try {
      const started = this.#typed ? this.#writer.send(typedFrame('turn.started', this.#turnId === undefined ? { agent_id: this.#agentId } : { agent_id: this.#agentId, turn_id: this.#turnId }), 'turn.started', this.#turnId, this.#eventSeq()) : undefined;
      if (started === undefined) this.#pump(source);
      else started.then(() => this.#pump(source), (error: unknown) => this.failed(error));
    } catch (error) {
      this.failed(error);
    }
  }

  #pump(source: ReplySource): void {
    if ('agent' in source) {
      source.agent[chatTurn](source.message, cancelledBy(this.#cancel, this.#turnId), this, source.decisions);
      return;
    }
    pull(source.chunks, this).then(() => this.#pulled(), (error: unknown) => this.failed(error));
  }

  /** False once the client is gone (unless the turn goes on without it) or the stream ended. */
  get open(): boolean {
    return this.#writer.open || this.#keep;
  }

  event(event: TurnEvent): Promise<void> | undefined {
    if (event.type === 'text') return this.chunk(event.text);
    if (event.type === 'tool.result') logToolFailure(this.#logger, this.#owner.fields, event);
    // The plain stream carries text only; the typed one each call and its result, in order between the deltas.
    if (event.type !== 'tool.call' && event.type !== 'tool.result' && event.type !== 'tool.approval_required') return undefined;
    if (!this.open) throw new AgentRouterError(499, 'client_closed', 'Client closed the connection');
    const payload =
      event.type === 'tool.call' ? toolCallPayload(event.call) : event.type === 'tool.result' ? toolResultPayload(event.call, event.outcome) : { type: event.type, ...(approvalList([event.call])[0] as JsonObject) };
    return this.#tool({ event: event.type, data: JSON.stringify(payload) });
  }

  /** A tool event: counted and logged in both modes (so ids agree), sent in the typed stream only. */
  #tool(entry: { event: string; data: string }): Promise<void> | undefined {
    this.#seq++;
    this.#log?.tool(entry);
    return this.#typed ? this.#writer.send(entry.data, entry.event, this.#turnId, this.#eventSeq()) : undefined;
  }

  /** A remote typed stream's tool event, sent on as it came. */
  relay(event: RelayedEvent): Promise<void> | undefined {
    if (!this.open) throw new AgentRouterError(499, 'client_closed', 'Client closed the connection');
    if (event.event === 'turn.paused') {
      this.#paused = (JSON.parse(event.data) as { pending_approvals: JsonObject[] }).pending_approvals;
      return undefined;
    }
    return this.#tool({ event: event.event, data: event.data });
  }

  chunk(text: string): Promise<void> | undefined {
    // A turn whose client is gone ends without committing (as the pull loop stops pulling).
    if (!this.open) throw new AgentRouterError(499, 'client_closed', 'Client closed the connection');
    this.#seq++;
    this.#log?.text(text);
    if (!this.#typed) {
      if (this.#seam !== undefined) text = this.#seam.next(text);
      else if (ChunkSeam.needed(text)) text = (this.#seam = new ChunkSeam()).next(text);
      return text === '' ? undefined : this.#writer.send(text, undefined, this.#turnId, this.#eventSeq());
    }
    this.#text += text;
    return this.#writer.send(typedFrame('text.delta', { text }), 'text.delta', this.#turnId, this.#eventSeq());
  }

  /** The turn paused on calls waiting for approval (`done` follows). */
  paused(pending: readonly ToolCall[]): void {
    this.#paused = approvalList(pending);
  }

  /** A pulled stream ran out: complete, unless the pull stopped because the request was cut. */
  #pulled(): void {
    const cancel = this.#cancel;
    if (cancel.aborted) return this.failed(cancel.reason);
    this.done();
  }

  /**
   * The turn completed; a local agent's is committed, even when the request was cut during the commit.
   * A reply the provider cut short says so in the typed stream's result (plain SSE has no field for it).
   */
  done(reply?: string, truncated = false): void {
    // A half pair still held when the reply ended goes out (as U+FFFD) in an event and a log entry of its own: an empty chunk.
    if (this.#seam?.holding === true && this.open) this.chunk('');
    if (this.#log !== undefined) {
      const text = this.#typed ? this.#text : (reply ?? this.#log.joined() ?? '');
      const finished: JsonObject = truncated ? { agent_id: this.#agentId, text, truncated } : { agent_id: this.#agentId, text };
      if (this.#paused !== undefined) finished['pending_approvals'] = this.#paused;
      this.#log.end({ finished });
    }
    this.#seq++;
    if (!this.#typed) return this.#end(formatEvent('[DONE]', 'done', this.#turnId, this.#eventSeq()));
    if (this.#paused !== undefined) return this.#end(formatEvent(typedFrame('turn.paused', { pending_approvals: this.#paused }), 'turn.paused', this.#turnId, this.#eventSeq()));
    const result = truncated ? { agent_id: this.#agentId, text: this.#text, truncated } : { agent_id: this.#agentId, text: this.#text };
    this.#end(formatEvent(typedFrame('turn.finished', { result }), 'turn.finished', this.#turnId, this.#eventSeq()));
  }

  failed(error: unknown): void {
    const cancel = this.#cancel;
    const cause = cancel.aborted ? cancel.reason : error;
    const status = statusOf(cause);
    this.#failure = cause;
    if (worthLogging(cause)) this.#logger.error(`AgentRouter: stream for agent ${JSON.stringify(this.#agentId)} failed with ${status}`, cause, this.#owner.fields);
    const body = errorBody(cause);
    this.#log?.end({ failed: body });
    this.#seq++;
    this.#end(this.#typed ? formatEvent(typedFrame('turn.failed', body), 'turn.failed', this.#turnId, this.#eventSeq()) : formatEvent(JSON.stringify(body), 'error', this.#turnId, this.#eventSeq()));
  }

  /** The seq in the `id:` (`<turn_id>:<seq>`) of the event being sent; a turn with no id (a transport's own stream) sends none. */
  #eventSeq(): number {
    return this.#typed ? this.#seq + 1 : this.#seq;
  }

  /** Writes the last frame once the turn's log is copied (see TurnLog.whenCopied), and reports the end; never throws. */
  #end(frame: string): void {
    if (this.#log === undefined) return this.#finish(frame);
    this.#log.whenCopied(() => this.#finish(frame));
  }

  #finish(frame: string): void {
    try {
      this.#writer.end(frame);
    } catch (error) {
      this.#logger.error(`AgentRouter: ending the stream for agent ${JSON.stringify(this.#agentId)} failed`, error, this.#owner.fields);
    }
    this.#owner.done(this.#failure);
  }
}

/** Chunks pulled from a remote (or a subclass's own stream()) until the client is gone. */
async function pull(chunks: AsyncIterable<string | RelayedEvent>, stream: ReplyStream): Promise<void> {
  for await (const text of chunks) {
    if (!stream.open) break;
    // Nothing to send; an empty log entry is the plain stream's flush of a held half pair.
    if (text === '') continue;
    const sending = typeof text === 'string' ? stream.chunk(text) : stream.relay(text);
    if (sending !== undefined) await sending;
  }
}

function typedFrame(type: string, payload: Record<string, unknown>): string {
  return JSON.stringify({ type, ...payload });
}
