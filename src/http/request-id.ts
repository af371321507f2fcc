import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';

/** A caller's `x-request-id` kept as it is: a plain token (no spaces, quotes or control characters), at most 128 characters. */
const PLAIN_TOKEN = /^[A-Za-z0-9._:-]{1,128}$/;

/** The caller's `x-request-id` when it is a plain token, else undefined. */
export function callerRequestId(req: IncomingMessage): string | undefined {
  const id = req.headers['x-request-id'];
  return typeof id === 'string' && PLAIN_TOKEN.test(id) ? id : undefined;
}

/** The request's id: the caller's plain token, or a new random one. */
export function requestIdFor(req: IncomingMessage): string {
  return callerRequestId(req) ?? randomUUID();
}

/** The request's id, set now in the `x-request-id` response header (for answers not written through an Exchange). */
export function tagRequest(req: IncomingMessage, res: ServerResponse): string {
  const id = requestIdFor(req);
  if (!res.headersSent) res.setHeader('x-request-id', id);
  return id;
}
