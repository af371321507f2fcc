import type { IncomingMessage } from 'node:http';
import { httpErrors } from '../errors.ts';
import { callerRequestId } from '../http/request-id.ts';
import type { RouteAction } from './routes.ts';

// What the router reads from a request beside its path: body shapes and the request id.

/** An inbound `x-request-id` (not a credential) travels on to a remote; odd values are dropped. */
export const requestIdOf: (req: IncomingMessage) => string | undefined = callerRequestId;

/** The body as an object; 400 for any other JSON value. */
export function asObject(value: unknown, message = 'JSON body must be an object, e.g. {"message": "Hello"}'): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw httpErrors.badRequest('invalid_body', message);
  return value as Record<string, unknown>;
}

/** Chat's `message`: a non-empty string, or 400. */
export function requireMessage(body: Record<string, unknown>): string {
  const message = body['message'];
  if (typeof message !== 'string' || message === '') {
    throw httpErrors.badRequest('missing_message', 'Chat needs a non-empty "message" string, e.g. {"message": "Hello"}');
  }
  return message;
}

/** An invoke's `{method, params}`: the body itself, or its `payload` object. */
export function invokePayload(body: Record<string, unknown>): Record<string, unknown> {
  const payload = body['payload'];
  if (payload === undefined) return body;
  return asObject(payload, '"payload" must be an object, e.g. {"payload": {"method": "increment", "params": {"by": 2}}}');
}

/** The generic envelope: `{"action": "chat" | "invoke" | "state", ...}`, chat by default. */
export function unwrapEnvelope(body: Record<string, unknown>): { action: Extract<RouteAction, 'chat' | 'invoke' | 'state'>; body: Record<string, unknown> } {
  const action = body['action'] ?? 'chat';
  if (action === 'chat' || action === 'state') return { action, body };
  // Wrapped in "payload" as ai-query's Python HTTPTransport client sends it, or bare beside "action", as /invoke takes it.
  if (action === 'invoke') return { action, body: invokePayload(body) };
  throw httpErrors.badRequest('unknown_action', `Unknown action: ${typeof action === 'string' ? action.slice(0, 64) : typeof action}; use "chat", "invoke" or "state"`);
}
