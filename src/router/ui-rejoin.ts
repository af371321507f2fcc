import { AgentRouterError, errorBody } from '../errors.ts';
import { SSEWriter } from '../http/sse-writer.ts';
import type { TurnCancel } from '../lib/cancel.ts';
import type { JsonObject } from '../types.ts';
import type { DispatchHost } from './dispatch.ts';
import type { Exchange } from './exchange.ts';
import type { LogEntry, LogFollower, TurnLog } from './turn-log.ts';
import { UI_HEADERS } from './ui-stream.ts';

/**
 * `GET .../turns/{turn_id}/events?stream=ui`: the turn's log replayed from
 * its start as UI message parts, then followed live to `data: [DONE]`. The
 * UI stream has no ids, so there is no Last-Event-ID to resume from.
 */
export function rejoinUI(host: DispatchHost, exchange: Exchange, log: TurnLog, cancel: TurnCancel): void {
  new UIRejoined(host, exchange, log, cancel).start();
}

/** The whole log is needed: an expired front cannot be skipped in a stream without ids. */
export function uiReplayExpired(turnId: string): AgentRouterError {
  return new AgentRouterError(410, 'replay_expired', `The first events of turn ${JSON.stringify(turnId)} are no longer kept (replayLimit), and a ui rejoin replays from the start`, { expose: true });
}

/** One ui rejoin: a cursor into the log, each entry written as the live UI stream wrote it. */
class UIRejoined implements LogFollower {
  readonly #exchange: Exchange;
  readonly #log: TurnLog;
  readonly #cancel: TurnCancel;
  readonly #writer: SSEWriter;
  #sent = 0;
  #textId: string | undefined;
  #parts = 0;
  /** A tool result ended the step: the next text or call begins another. */
  #stepDone = false;
  #waiting = false;
  #over = false;
  readonly #onCut = (): void => this.#finish();

  constructor(host: DispatchHost, exchange: Exchange, log: TurnLog, cancel: TurnCancel) {
    this.#exchange = exchange;
    this.#log = log;
    this.#cancel = cancel;
    const { pingInterval, stallTimeout } = host.streamOptions;
    this.#writer = new SSEWriter(exchange.res, { pingInterval, stallTimeout, headers: { ...exchange.headers, ...UI_HEADERS } });
  }

  start(): void {
    this.#part({ type: 'start', messageId: this.#log.turnId });
    this.#part({ type: 'start-step' });
    if (this.#cancel.aborted) return this.#finish();
    this.#cancel.onAbort(this.#onCut);
    this.#log.follow(this);
    this.wake();
  }

  wake(): void {
    if (this.#waiting || this.#over) return;
    const log = this.#log;
    while (this.#sent + 1 < log.next) {
      const entry = log.at(this.#sent + 1);
      if (entry === undefined) return this.#expired();
      this.#sent++;
      if (typeof entry !== 'string' && !('data' in entry)) return this.#end(entry);
      const waiting = this.#render(entry);
      if (waiting !== undefined) {
        this.#waiting = true;
        waiting.then(
          () => {
            this.#waiting = false;
            this.wake();
          },
          () => this.#finish(),
        );
        return;
      }
    }
  }

  /** A text or tool entry's parts; the last send's wait, if the client reads slowly. */
  #render(entry: Exclude<LogEntry, { finished: JsonObject } | { failed: JsonObject }>): Promise<void> | undefined {
    if (typeof entry === 'string') {
      this.#nextStep();
      if (this.#textId === undefined) this.#part({ type: 'text-start', id: (this.#textId = `text-${++this.#parts}`) });
      return this.#part({ type: 'text-delta', id: this.#textId, delta: entry });
    }
    const data = JSON.parse(entry.data) as { id: string; name: string; arguments?: unknown; result?: unknown; error?: { message: string } };
    if (entry.event === 'tool.call') {
      this.#nextStep();
      this.#closeText();
      return this.#part({ type: 'tool-input-available', toolCallId: data.id, toolName: data.name, input: data.arguments, dynamic: true });
    }
    if (entry.event !== 'tool.result') return undefined; // tool.approval_required: the input part was the call
    this.#stepDone = true;
    if (data.error !== undefined) return this.#part({ type: 'tool-output-error', toolCallId: data.id, errorText: data.error.message, dynamic: true });
    return this.#part({ type: 'tool-output-available', toolCallId: data.id, output: data.result ?? null, dynamic: true });
  }

  #end(entry: { finished: JsonObject } | { failed: JsonObject }): void {
    let last: Record<string, unknown>;
    if ('finished' in entry) {
      const { finished } = entry;
      this.#closeText();
      this.#part({ type: 'finish-step' });
      last = { type: 'finish', finishReason: finished['pending_approvals'] !== undefined ? 'tool-calls' : finished['truncated'] === true ? 'length' : 'stop' };
    } else {
      last = { type: 'error', errorText: entry.failed['error'], code: entry.failed['code'] };
    }
    this.#writer.end(`data: ${JSON.stringify(last)}\n\ndata: [DONE]\n\n`);
    this.#finish();
  }

  #nextStep(): void {
    if (!this.#stepDone) return;
    this.#stepDone = false;
    this.#closeText();
    this.#part({ type: 'finish-step' });
    this.#part({ type: 'start-step' });
  }

  #closeText(): void {
    if (this.#textId === undefined) return;
    this.#part({ type: 'text-end', id: this.#textId });
    this.#textId = undefined;
  }

  #part(part: Record<string, unknown>): Promise<void> | undefined {
    return this.#writer.send(JSON.stringify(part));
  }

  /** The client read too slowly: the entries it needs next were dropped (replayLimit). */
  #expired(): void {
    const body = errorBody(uiReplayExpired(this.#log.turnId));
    this.#writer.end(`data: ${JSON.stringify({ type: 'error', errorText: body.error, code: body.code })}\n\ndata: [DONE]\n\n`);
    this.#finish();
  }

  #finish(): void {
    if (this.#over) return;
    this.#over = true;
    this.#log.unfollow(this);
    this.#cancel.offAbort(this.#onCut);
    this.#writer.end();
    this.#exchange.done();
  }
}
