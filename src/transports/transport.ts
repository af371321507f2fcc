import type { TraceLink } from '../lib/trace.ts';
import type { JsonObject, OnDisconnect, WhenBusy } from '../types.ts';

export interface TransportCallOptions {
  /** Aborts the remote call (the router passes the client's disconnect). */
  signal?: AbortSignal | undefined;
  /** Sent as `x-request-id`, so one request can be followed across hops. */
  requestId?: string | undefined;
  /**
   * The headers of the request being forwarded: the router passes its
   * inbound request's (Node's `req.headers`), for a transport that sends
   * some of them on (HTTPTransport's `forwardHeaders`).
   */
  requestHeaders?: Readonly<Record<string, string | string[] | undefined>> | undefined;
  /**
   * What the remote does when the agent is busy, and when this call's connection drops: sent as the
   * remote's `?when_busy=` and `?on_disconnect=`. The router passes a request's own.
   */
  whenBusy?: WhenBusy | undefined;
  onDisconnect?: OnDisconnect | undefined;
  /** Hears the remote turn's id (its `Turn-Id` header) once the remote answers: the router relays it. */
  onTurnId?: ((turnId: string) => void) | undefined;
  /** Where the call stands in its trace: the router passes its request's. @internal */
  trace?: TraceLink | undefined;
}

/**
 * A stream of reply chunks from a remote agent. `ready` settles once the
 * remote has accepted the stream (its response headers arrived): it rejects
 * with the same AgentRouterError the non-streaming call would, so the router
 * can still answer with a JSON status before it commits to SSE.
 */
export interface ChunkStream extends AsyncIterable<string> {
  readonly ready: Promise<void>;
}

/**
 * A registry target that lives elsewhere. The router forwards every request
 * for such an id through it; failures are AgentRouterErrors carrying the
 * status to answer (a relayed 4xx, 502 for a failing remote, 504 on timeout).
 */
export interface AgentTransport {
  chat(agentId: string, message: string, options?: TransportCallOptions): Promise<string>;
  stream(agentId: string, message: string, options?: TransportCallOptions): ChunkStream;
  invoke(agentId: string, method: string, params?: unknown, options?: TransportCallOptions): Promise<unknown>;
  state(agentId: string, options?: TransportCallOptions): Promise<JsonObject>;
}

/**
 * A registry target is local (an Agent class) when it is a function, remote
 * when it is an object with the four transport methods. An Agent instance
 * has `chat` but its `state` is not a method, so it is not mistaken for one.
 */
export function isTransport(target: unknown): target is AgentTransport {
  if (typeof target !== 'object' || target === null) return false;
  const methods = target as Record<keyof AgentTransport, unknown>;
  return typeof methods.chat === 'function' && typeof methods.stream === 'function'
    && typeof methods.invoke === 'function' && typeof methods.state === 'function';
}
