import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { TurnCancel } from '../lib/cancel.ts';
import { AgentRouterError, statusOf, worthLogging } from '../errors.ts';
import type { Log, LogFields } from '../lib/logger.ts';
import type { TurnWatcher } from '../lib/cancel.ts';
import { requestIdFor } from '../http/request-id.ts';
import type { Observer, ObservedTurn } from './observe.ts';
import { incomingTrace, type TraceLink, type Tracer } from '../lib/trace.ts';
import { RequestSpans } from './trace-spans.ts';
import type { Turn } from '../agent/turn.ts';
import { sendError, sendJson } from '../http/respond.ts';
import { cutIfLeftUnread } from '../http/unread.ts';
import { stopWatching, whenAborted } from '../lib/signal-watch.ts';
import type { JsonObject } from '../types.ts';
import type { AgentTurns } from './agent-turns.ts';
import type { RunningTurn, RunningTurns } from './running-turns.ts';

/** What an exchange needs of its router. */
export interface ExchangeHost {
  readonly logger: Log;
  /** The turn hooks and metrics; undefined when none is on. */
  readonly observer: Observer | undefined;
  /** The `tracer` option; undefined when off. */
  readonly tracer: Tracer | undefined;
  /** How long a client may leave an answer unread before it is cut (Infinity: no limit). */
  readonly unreadMs: number;
  /** The requests running now: what abortAll() and the turn timeout reach. */
  readonly turns: RunningTurns<Exchange>;
  /** The local turns running or queued now, per agent (cancel, whenBusy). */
  readonly agentTurns: AgentTurns<Exchange>;
  /** A stream this exchange opened is over. */
  streamClosed(): void;
  /** The exchange's use of a pooled agent is over. */
  release(agentId: string): void;
}

/**
 * One request, from its route match to its answer. It answers exactly once,
 * with `finish` (a JSON reply), `fail` (a JSON error, or nothing more where a
 * stream already answered) or `done` (answered by someone else), and then
 * undoes what `begin` set up for its turn and tells its caller.
 */
export class Exchange implements RunningTurn, TurnWatcher, ObservedTurn {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly #host: ExchangeHost;
  /** Aborts the request's turn (RequestHint.signal). */
  readonly #outer: AbortSignal | undefined;
  #answered: (() => void) | undefined;
  agentId = '';
  query = '';
  /** The caller's `x-request-id` when plain, else a new one; echoed in the response. */
  readonly requestId: string;
  /** The matched route's action (metrics). */
  route = 'none';
  /** An invoke's method name (turn hooks). */
  action: string | undefined;
  // What the observer keeps of the request's turn (see ObservedTurn); untouched when it is off.
  turnStart = 0;
  loadedAt = 0;
  turn: Turn | undefined;
  failure: unknown;
  #turnOpen = false;
  /** Where the request's turn or remote call stands in its trace (see TraceLink). */
  trace: TraceLink | undefined;
  /** The request's spans, with a tracer. */
  spans: RequestSpans | undefined;
  /** The turn's cancel, once `begin` started one. */
  cancel: TurnCancel | undefined;
  /** The id of the local turn this request runs, sent before the turn starts (`Turn-Id`). */
  turnId: string | undefined;
  /** The agent is the pool's, to give back at the end. */
  pooled = false;
  /** Counted in the router's open streams. */
  streaming = false;
  /** A state read (no turn): its timeout says so. */
  reading = false;
  #onClose: (() => void) | undefined;
  #onOuterAbort: (() => void) | undefined;
  #over = false;
  // RunningTurns' links
  timed = false;
  began = 0;
  older: this | undefined;
  newer: this | undefined;

  constructor(host: ExchangeHost, req: IncomingMessage, res: ServerResponse, outer: AbortSignal | undefined, answered: (() => void) | undefined) {
    this.#host = host;
    this.req = req;
    this.res = res;
    this.#outer = outer;
    this.#answered = answered;
    this.requestId = requestIdFor(req);
    // With no tracer, only the header lookup: a valid traceparent is sent on as it came.
    if (host.tracer === undefined) this.trace = incomingTrace(req.headers, undefined);
    else this.trace = (this.spans = new RequestSpans(host.tracer, req)).link;
  }

  /**
   * The headers every answer to this request carries (`x-request-id`, and `Turn-Id` once it names a turn), made for its
   * one head: written with it, since setHeader costs a header map per response.
   */
  get headers(): Record<string, string> {
    return this.turnId === undefined ? { 'x-request-id': this.requestId } : { 'x-request-id': this.requestId, 'Turn-Id': this.turnId };
  }

  /** What a log record says of this request. */
  get fields(): LogFields {
    return { requestId: this.requestId, agentId: this.agentId, turnId: this.turnId };
  }

  /** The agent's Turn moved; a turn ending after its request did ends here. */
  turnPhase(turn: object, _phase: string): void {
    this.turn = turn as Turn;
    const observer = this.#host.observer;
    if (observer === undefined) return;
    observer.turnMoved(this);
    if (this.#over && this.#turnOpen && this.turn.over) this.#endTurn(observer);
  }

  get running(): boolean {
    const phase = this.turn?.phase;
    return phase === 'running' || phase === 'committing';
  }

  get cancellable(): boolean {
    const turn = this.turn;
    return turn === undefined || !(turn.phase === 'committing' || turn.over);
  }

  #endTurn(observer: Observer): void {
    this.#turnOpen = false;
    observer.turnEnded(this);
  }

  /**
   * Starts the request's turn: a cancel that the client leaving, the
   * caller's signal and (when `timed`) the turn timeout abort.
   */
  begin(timed: boolean, keepOnClose = false): TurnCancel {
    const cancel = (this.cancel = new TurnCancel());
    cancel.trace = this.trace;
    const res = this.res;
    this.timed = timed;
    this.#host.turns.add(this);
    // onDisconnect 'continue': the client leaving does not cut the turn (the timeout and abortAll still do).
    if (keepOnClose) return this.#watchOuter(cancel);
    // Not `writableFinished`: node:http2's compatibility response reports it once a cancelled stream closes, ended or not.
    this.#onClose = () => {
      if (!res.writableEnded) cancel.abort(new AgentRouterError(499, 'client_closed', 'Client closed the connection'));
    };
    res.on('close', this.#onClose);
    return this.#watchOuter(cancel);
  }

  /** The caller's signal (RequestHint.signal) aborts the turn too. */
  #watchOuter(cancel: TurnCancel): TurnCancel {
    const outer = this.#outer;
    if (outer !== undefined) {
      const onOuterAbort = (): void => cancel.abort(outer.reason);
      this.#onOuterAbort = onOuterAbort;
      if (outer.aborted) onOuterAbort();
      else whenAborted(outer, onOuterAbort);
    }
    return cancel;
  }

  /** Makes the id of the request's turn and sends it in the `Turn-Id` header (JSON replies and streams alike). */
  newTurnId(): string {
    const id = (this.turnId = randomUUID());
    if (this.spans !== undefined && this.cancel !== undefined) {
      this.cancel.trace = this.trace = this.spans.turnStarted(this.agentId, id, this.route === 'invoke' ? 'action' : 'chat');
    }
    const observer = this.#host.observer;
    // Watched always: a cancel from another process asks whether the turn runs yet.
    if (this.cancel !== undefined) this.cancel.watcher = this;
    if (observer !== undefined && this.cancel !== undefined) {
      this.#turnOpen = true;
      observer.turnStarted(this);
    }
    return id;
  }

  /** A remote's turn id, relayed while the answer has not begun. */
  relayTurnId(id: string): void {
    if (this.res.headersSent) return;
    this.turnId = id;
  }

  /** Sets `headers` on the response now: for an answer written elsewhere (a CORS preflight), and before CORS sets its own. */
  headersNow(): void {
    const headers = this.headers;
    for (const name in headers) this.res.setHeader(name, headers[name] as string);
  }

  /** Answers with a JSON reply. */
  finish(reply: JsonObject, status = 200): void {
    if (this.#over) return;
    try {
      sendJson(this.res, status, reply, this.headers);
      cutIfLeftUnread(this.res, this.#host.unreadMs);
    } catch (error) {
      // A reply that cannot be sent (a remote's result JSON cannot hold): answered as the failure.
      return this.fail(error);
    }
    this.done();
  }

  /**
   * Answers with the failure as a JSON error; once the turn was cut, the
   * cut's reason is the answer (a timeout's 504 rather than the model's abort).
   */
  fail(error: unknown): void {
    if (this.#over) return;
    const cancel = this.cancel;
    const cause = cancel?.aborted === true ? cancel.reason : error;
    if (worthLogging(cause)) this.#host.logger.error(`AgentRouter: request failed with ${statusOf(cause)}`, cause, this.fields);
    if (this.#host.observer !== undefined) this.failure = cause;
    this.spans?.failed(cause);
    // Writes nothing to a client that is gone; an action's own 499 reaches a client still there like any status.
    sendError(this.res, cause, this.headers);
    this.done();
  }

  /**
   * The request was answered (a stream ended, a preflight): undo what began its turn, and tell the caller, once.
   * `failure`: what a stream that began ended with, for the turn hooks and metrics.
   */
  done(failure?: unknown): void {
    if (this.#over) return;
    if (failure !== undefined && this.#host.observer !== undefined) this.failure = failure;
    this.#over = true;
    const host = this.#host;
    try {
      if (this.streaming) host.streamClosed();
      host.turns.delete(this);
      if (this.turnId !== undefined) host.agentTurns.delete(this);
      if (this.#onClose !== undefined) this.res.off('close', this.#onClose);
      if (this.#onOuterAbort !== undefined && this.#outer !== undefined) stopWatching(this.#outer, this.#onOuterAbort);
      if (this.pooled) host.release(this.agentId);
      const observer = host.observer;
      if (observer !== undefined) {
        observer.requestDone(this.route, this.res.statusCode);
        // A turn that outlives its request (onDisconnect continue) ends when its Turn does.
        if (this.#turnOpen && (this.turn === undefined || this.turn.over)) this.#endTurn(observer);
      }
      this.spans?.ended(this.res.statusCode);
    } finally {
      // Never thrown into what ended the request (the agent's turn, or a cancel.abort()).
      const answered = this.#answered;
      this.#answered = undefined;
      try {
        answered?.();
      } catch (error) {
        host.logger.error("AgentRouter: the host's callback for an answered request threw", error, this.fields);
      }
    }
  }
}
