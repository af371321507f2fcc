/**
 * The work of a framework's native route, shared by the Express, Koa and
 * Fastify contenders: the same replies as the bare server, written the way
 * an app on that framework would (its router, its body parser, its JSON reply).
 */
import { randomUUID } from 'node:crypto';
import { INITIAL_STATE } from '../lib/protocol.ts';

const states = new Map<string, { topic: string }>();

export function stateReply(id: string): { agent_id: string; state: { topic: string } } {
  let state = states.get(id);
  if (state === undefined) {
    state = { ...INITIAL_STATE };
    states.set(id, state);
  }
  return { agent_id: id, state };
}

/** The chat reply, or undefined when the body has no message (the route answers 400). It names its turn as the router's does. */
export function chatReply(id: string, body: unknown): { agent_id: string; turn_id: string; response: string } | undefined {
  const message = typeof body === 'object' && body !== null ? (body as { message?: unknown }).message : undefined;
  if (typeof message !== 'string' || message === '') return undefined;
  stateReply(id);
  return { agent_id: id, turn_id: randomUUID(), response: message };
}

export const BAD_MESSAGE = { error: 'message missing', code: 'missing_message' } as const;

export const nativeHooks = { count: () => states.size, evict: () => states.clear() };
