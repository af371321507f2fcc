import type { ServerResponse } from 'node:http';
import { errorBody, statusOf, AgentRouterError } from '../errors.ts';

/** Writes a JSON response with its length; the one place JSON answers are made. */
export function sendJson(res: ServerResponse, status: number, body: unknown, headers?: Readonly<Record<string, string>>): void {
  if (res.headersSent || res.destroyed) return;
  const payload = JSON.stringify(body);
  const length = Buffer.byteLength(payload);
  // writeHead with an object skips setHeader's per-call work; headers set earlier (CORS) are merged in.
  res.writeHead(
    status,
    headers === undefined
      ? { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': length }
      : { ...headers, 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': length },
  );
  // A string, not a Buffer: Node 20 puts a Buffer body's head in front of a `100 Continue` already
  // queued for a pipelined request (it unshifts the head onto the queue), which garbles the stream.
  res.end(payload);
}

/** Answers an error as `{"error", "code"}` with its status and headers; never throws. */
export function sendError(res: ServerResponse, error: unknown): void {
  const headers = error instanceof AgentRouterError ? error.headers : undefined;
  try {
    sendJson(res, statusOf(error), errorBody(error), headers);
  } catch {
    // A status or header Node refuses to write (a subclass's own): a plain 500 rather than a throw
    // from a rejection handler, which would take the process down.
    sendJson(res, 500, errorBody(undefined));
  }
}
