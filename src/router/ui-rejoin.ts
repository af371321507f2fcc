import { AgentRouterError, errorBody } from '../errors.ts';
import { SSEWriter } from '../http/sse-writer.ts';
import type { TurnCancel } from '../lib/cancel.ts';
import type { DispatchHost } from './dispatch.ts';
import type { Exchange } from './exchange.ts';
import { LogCursor, type LogEnd } from './log-cursor.ts';
import type { ToolEntry, TurnLog } from './turn-log.ts';
import { finishReason, lastFrames, UIParts } from './ui-parts.ts';
import { UI_HEADERS } from './ui-stream.ts';

/**
 * `GET .../turns/{turn_id}/events?stream=ui`: the turn's log replayed from
 * its start as UI message parts, then followed live to `data: [DONE]`. The
 * UI stream has no ids, so there is no Last-Event-ID to resume from.
 */
export function rejoinUI(host: DispatchHost, exchange: Exchange, log: TurnLog, cancel: TurnCancel): void {
  const { pingInterval, stallTimeout } = host.streamOptions;
  const writer = new SSEWriter(exchange.res, { pingInterval, stallTimeout, headers: { ...exchange.headers, ...UI_HEADERS } });
  new UIRejoined(exchange, log, writer, cancel).start();
}

/** The whole log is needed: an expired front cannot be skipped in a stream without ids. */
export function uiReplayExpired(turnId: string): AgentRouterError {
  return new AgentRouterError(410, 'replay_expired', `The first events of turn ${JSON.stringify(turnId)} are no longer kept (replayLimit), and a ui rejoin replays from the start`, { expose: true });
}

/** One ui rejoin: each entry of the log written as the live UI stream wrote it. */
class UIRejoined extends LogCursor {
  readonly #parts: UIParts;

  constructor(exchange: Exchange, log: TurnLog, writer: SSEWriter, cancel: TurnCancel) {
    super(exchange, log, writer, cancel, 0);
    this.#parts = new UIParts(writer);
  }

  start(): void {
    this.#parts.start(this.log.turnId);
    this.follow();
  }

  protected send(entry: string | ToolEntry): Promise<void> | undefined {
    if (typeof entry === 'string') return entry === '' ? undefined : this.#parts.text(entry);
    const data = JSON.parse(entry.data) as { id: string; name: string; arguments?: unknown; result?: unknown; error?: { message: string } };
    if (entry.event === 'tool.call') return this.#parts.toolCall(data.id, data.name, data.arguments);
    if (entry.event !== 'tool.result') return undefined; // tool.approval_required: the input part was the call
    return this.#parts.toolResult(data.id, data.error === undefined ? { output: data.result ?? null } : { errorText: data.error.message });
  }

  protected end(entry: LogEnd): void {
    if ('finished' in entry) {
      this.#parts.finishStep();
      this.writer.end(lastFrames({ type: 'finish', finishReason: finishReason(entry.finished) }));
    } else {
      this.writer.end(lastFrames({ type: 'error', errorText: entry.failed['error'], code: entry.failed['code'] }));
    }
  }

  protected expired(): void {
    const body = errorBody(uiReplayExpired(this.log.turnId));
    this.writer.end(lastFrames({ type: 'error', errorText: body.error, code: body.code }));
  }
}
