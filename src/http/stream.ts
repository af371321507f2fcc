import type { ServerResponse } from 'node:http';
import type { TurnCancel } from '../agent/cancel.ts';
import { AgentRouterError, errorBody, statusOf } from '../errors.ts';
import { formatEvent } from '../sse/format.ts';
import { SSEWriter } from '../sse/writer.ts';
import type { ChunkStream } from '../transports/transport.ts';
import type { Logger } from './router.ts';

/** Where a streamed reply comes from: chunks to pull, or a turn that pushes them (a local agent). */
export type ReplySource =
  | { agentId: string; chunks: AsyncIterable<string> | ChunkStream }
  | { agentId: string; push: (onChunk: (chunk: string) => Promise<void> | undefined) => Promise<unknown> };

/**
 * Streams one chat reply as SSE (DESIGN.md section 3): one event per chunk,
 * then `event: done` + `data: [DONE]`; a failure after the stream began ends
 * it with `event: error`. With `typed`, frames are the typed event stream
 * (`turn.started`, `text.delta`, `turn.finished` / `turn.failed`), each
 * payload carrying its own `type`.
 *
 * A remote stream is awaited (`ready`) before the SSE headers go out, so a
 * remote 404 or 502 is still answered as a JSON status.
 */
export function streamReply(res: ServerResponse, source: ReplySource, options: StreamOptions): Promise<void> {
  if ('chunks' in source && 'ready' in source.chunks) return source.chunks.ready.then(() => relayReply(res, source, options));
  return relayReply(res, source, options);
}

/** How one reply is streamed. */
export interface StreamOptions {
  /** The typed event stream (`stream=events`) rather than plain `data:` chunks. */
  typed: boolean;
  /** The request's cancel: an aborted turn ends the stream with its reason. */
  cancel: TurnCancel;
  pingInterval: number | undefined;
  logger: Logger;
}

/**
 * The stream once its headers may go out. A promise chain, not an async
 * function: a stream held open keeps no suspended frame here. Never rejects:
 * a failure ends the stream with an error event.
 */
function relayReply(res: ServerResponse, source: ReplySource, { typed, cancel, pingInterval, logger }: StreamOptions): Promise<void> {
  const writer = new SSEWriter(res, { pingInterval });
  let text = '';
  const send = typed
    ? (chunk: string): Promise<void> | undefined => {
      text += chunk;
      return writer.send(typedFrame('text.delta', { text: chunk }), 'text.delta');
    }
    : (chunk: string): Promise<void> | undefined => writer.send(chunk);
  const fail = (error: unknown): void => {
    const cause = cancel.aborted ? cancel.reason : error;
    const status = statusOf(cause);
    if (status >= 500 && status !== 503) logger.error(`AgentRouter: stream for agent ${JSON.stringify(source.agentId)} failed with ${status}`, cause);
    if (!typed) return writer.error(errorBody(cause));
    writer.end(formatEvent(typedFrame('turn.failed', errorBody(cause)), 'turn.failed'));
  };
  const finish = (): void => {
    if (cancel.aborted) return fail(cancel.reason);
    if (!typed) return writer.done();
    writer.end(formatEvent(typedFrame('turn.finished', { result: { agent_id: source.agentId, text } }), 'turn.finished'));
  };
  const pump = (): Promise<unknown> => {
    if (!('push' in source)) return pull(source.chunks, writer, send);
    return source.push((chunk) => {
      // As the pull loop's break: a turn whose client is gone ends without committing.
      if (!writer.open) throw new AgentRouterError(499, 'client_closed', 'Client closed the connection');
      return send(chunk);
    });
  };
  let pumping: Promise<unknown>;
  try {
    const started = typed ? writer.send(typedFrame('turn.started', { agent_id: source.agentId }), 'turn.started') : undefined;
    pumping = started === undefined ? pump() : started.then(pump);
  } catch (error) {
    fail(error);
    return Promise.resolve();
  }
  return pumping.then(finish, fail);
}

/** Chunks pulled from a remote (or a subclass's own stream()) until the client is gone. */
async function pull(chunks: AsyncIterable<string>, writer: SSEWriter, send: (chunk: string) => Promise<void> | undefined): Promise<void> {
  for await (const chunk of chunks) {
    if (!writer.open) break;
    const sending = send(chunk);
    if (sending !== undefined) await sending;
  }
}

function typedFrame(type: string, payload: Record<string, unknown>): string {
  return JSON.stringify({ type, ...payload });
}
