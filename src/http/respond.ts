import type { ServerResponse } from 'node:http';
import { errorBody, statusOf, AgentRouterError } from '../errors.ts';

/** Writes a JSON response with its length; the one place JSON answers are made. */
export function sendJson(res: ServerResponse, status: number, body: unknown, headers?: Readonly<Record<string, string>>): void {
  if (res.headersSent || res.destroyed) return;
  const payload = JSON.stringify(body);
  res.statusCode = status;
  if (headers !== undefined) for (const name in headers) res.setHeader(name, headers[name] as string);
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(payload));
  res.end(payload);
}

/** Answers an error as `{"error", "code"}` with its status and headers. */
export function sendError(res: ServerResponse, error: unknown): void {
  const headers = error instanceof AgentRouterError ? error.headers : undefined;
  sendJson(res, statusOf(error), errorBody(error), headers);
}
