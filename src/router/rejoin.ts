import { AgentRouterError, errorBody, httpErrors } from '../errors.ts';
import { queryParam } from '../http/path.ts';
import { SSEWriter } from '../http/sse-writer.ts';
import type { TurnCancel } from '../lib/cancel.ts';
import { formatEvent } from '../sse/format.ts';
import { ChunkSeam } from '../sse/seams.ts';
import { sharedChannelOf, type DispatchHost } from './dispatch.ts';
import type { Exchange } from './exchange.ts';
import { LogCursor, type LogEnd } from './log-cursor.ts';
import { nextEventsExpired, type LogEntry, type ToolEntry, type TurnLog } from './turn-log.ts';
import { rejoinUI, uiReplayExpired } from './ui-rejoin.ts';
import { sharedLog } from './shared-turns.ts';

/**
 * `GET /{agent_id}/turns/{turn_id}/events`: the events of a streamed turn
 * after `Last-Event-ID` (header, or `?last_event_id=`), then the live ones
 * to its end, in the mode asked (`?stream=events` typed, `ui` from the start, else plain).
 */
export function rejoin(host: DispatchHost, exchange: Exchange, turnId: string): Promise<void> | void {
  const log = host.replays.get(turnId);
  if (log !== undefined) return serveLog(host, exchange, log, false);
  // A turn another process ran, when the agent's storage is shared with it.
  const channel = sharedChannelOf(host, exchange);
  if (channel === undefined) throw turnNotFound(exchange, turnId);
  return sharedLog(channel, turnId, host.streamOptions.stallTimeout).then((shared) => {
    if (shared === undefined) throw turnNotFound(exchange, turnId);
    exchange.res.once('close', shared.stop);
    try {
      serveLog(host, exchange, shared.log, true);
    } catch (error) {
      shared.stop();
      throw error;
    }
  });
}

function turnNotFound(exchange: Exchange, turnId: string): AgentRouterError {
  return httpErrors.notFound('turn_not_found', `No turn ${JSON.stringify(turnId)} of agent ${JSON.stringify(exchange.agentId)} to rejoin (finished turns are kept for replayTTL seconds)`);
}

/** `copy`: another process's log, read from the shared storage, which may lag behind what that process sent. */
function serveLog(host: DispatchHost, exchange: Exchange, log: TurnLog, copy: boolean): void {
  const turnId = log.turnId;
  // Another agent's turn is as unknown here as one never seen.
  if (log.agentId !== exchange.agentId) throw turnNotFound(exchange, turnId);
  const mode = queryParam(exchange.query, 'stream')?.toLowerCase();
  if (mode === 'ui' && log.first > 1) throw uiReplayExpired(turnId);
  const typed = mode === 'events';
  const header = exchange.req.headers['last-event-id'];
  // The UI stream sends no ids: whatever Last-Event-ID comes, a ui rejoin replays from the start.
  const seen = mode === 'ui' ? 0 : lastSeq(typeof header === 'string' ? header : queryParam(exchange.query, 'last_event_id'), turnId);
  // Entries are numbered as the plain stream's seqs; the typed stream's turn.started is 1 before them.
  const after = typed ? Math.max(0, seen - 1) : seen;
  if (after + 1 < log.first) {
    throw new AgentRouterError(410, 'replay_expired', `The events after ${seen} of turn ${JSON.stringify(turnId)} are no longer kept (replayLimit)`, { expose: true });
  }
  if (after > log.next - 1 && (log.ended || !copy)) throw badLastEventId(turnId);
  exchange.turnId = turnId; // named in its Turn-Id header and its log records
  if (log.ended && after === log.next - 1) {
    // The client has the whole turn: 204 is what tells an EventSource to stop reconnecting.
    exchange.res.writeHead(204, exchange.headers).end();
    return exchange.done();
  }
  host.checkStreams();
  const cancel = exchange.begin(false);
  host.openStream();
  exchange.streaming = true;
  if (mode === 'ui') return rejoinUI(host, exchange, log, cancel);
  const { pingInterval, stallTimeout } = host.streamOptions;
  const writer = new SSEWriter(exchange.res, { pingInterval, stallTimeout, headers: exchange.headers });
  new Rejoined(exchange, log, writer, typed, after, cancel).start(typed && seen === 0);
}

/** The seq a Last-Event-ID names (0 for none); one of another turn is refused. */
function lastSeq(value: string | undefined, turnId: string): number {
  if (value === undefined || value === '') return 0;
  const colon = value.lastIndexOf(':');
  const seq = Number(value.slice(colon + 1));
  if ((colon !== -1 && value.slice(0, colon) !== turnId) || !Number.isSafeInteger(seq) || seq < 0 || value.slice(colon + 1) === '') {
    throw badLastEventId(turnId);
  }
  return seq;
}

function badLastEventId(turnId: string): AgentRouterError {
  return httpErrors.badRequest('bad_last_event_id', `Last-Event-ID must be "${turnId}:<seq>", an id this turn's stream sent`);
}

/** One rejoined stream in the plain or the typed mode, each event with the id it had live. */
class Rejoined extends LogCursor {
  readonly #typed: boolean;
  readonly #seam = new ChunkSeam();

  constructor(exchange: Exchange, log: TurnLog, writer: SSEWriter, typed: boolean, after: number, cancel: TurnCancel) {
    super(exchange, log, writer, cancel, after);
    this.#typed = typed;
    // The plain stream holds back a split CRLF or surrogate pair: replay the entries before as the first stream did.
    if (!typed) for (let i = log.first; i <= Math.min(after, log.next - 1); i++) this.#render(log.at(i) as LogEntry, i);
  }

  start(sendStarted: boolean): void {
    if (sendStarted) this.writer.send(JSON.stringify({ type: 'turn.started', agent_id: this.log.agentId, turn_id: this.log.turnId }), 'turn.started', this.log.turnId, 1);
    this.follow();
  }

  protected send(entry: string | ToolEntry, index: number): Promise<void> | undefined {
    const frame = this.#render(entry, index);
    if (frame === '') return undefined;
    return this.writer.send(frame, typeof entry === 'string' ? (this.#typed ? 'text.delta' : undefined) : entry.event, this.log.turnId, this.#seqOf(index));
  }

  protected end(entry: LogEnd, index: number): void {
    this.writer.end(this.#render(entry, index));
  }

  /** The plain stream's seam still reads what the client had (a CRLF may be split at its last event). */
  protected override had(entry: string | ToolEntry, index: number): void {
    if (!this.#typed) this.#render(entry, index);
  }

  /** A text entry's data (sent with its id), or an end's whole frame; the plain stream's seam moves on either way. */
  #render(entry: LogEntry, index: number): string {
    if (typeof entry === 'string') {
      // An empty entry is the plain stream's flush of a held half pair (see ChunkSeam): nothing in the typed one.
      if (this.#typed) return entry === '' ? '' : JSON.stringify({ type: 'text.delta', text: entry });
      return this.#seam.next(entry);
    }
    if ('data' in entry) return this.#typed ? entry.data : '';
    const [id, seq] = [this.log.turnId, this.#seqOf(index)];
    if ('finished' in entry) {
      // A paused turn ends as it did live: turn.paused with its list.
      const pending = entry.finished['pending_approvals'];
      if (this.#typed && pending !== undefined) return formatEvent(JSON.stringify({ type: 'turn.paused', pending_approvals: pending }), 'turn.paused', id, seq);
      if (this.#typed) return formatEvent(JSON.stringify({ type: 'turn.finished', result: entry.finished }), 'turn.finished', id, seq);
      return formatEvent('[DONE]', 'done', id, seq);
    }
    if (this.#typed) return formatEvent(JSON.stringify({ type: 'turn.failed', ...entry.failed }), 'turn.failed', id, seq);
    return formatEvent(JSON.stringify(entry.failed), 'error', id, seq);
  }

  /** The seq in the `id:` of entry `index`, as the live stream sent it. */
  #seqOf(index: number): number {
    return this.#typed ? index + 1 : index;
  }

  /** The client read too slowly: the events it needs next were dropped (replayLimit). */
  protected expired(): void {
    const body = errorBody(nextEventsExpired());
    this.writer.end(this.#typed ? formatEvent(JSON.stringify({ type: 'turn.failed', ...body }), 'turn.failed') : formatEvent(JSON.stringify(body), 'error'));
  }
}
