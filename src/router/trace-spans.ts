import type { IncomingMessage } from 'node:http';
import { errorCode, failSpan, incomingTrace, linkUnder, SPAN_KIND, startSpan, type TraceLink, type TraceSpan, type Tracer } from '../lib/trace.ts';
import type { RouteAction } from './routes.ts';

/** Each route's path after the agent's segment, as `http.route` names it. */
const ROUTE_PATHS: Record<RouteAction, string> = {
  chat: '/chat',
  invoke: '/invoke',
  state: '/state',
  request: '',
  events: '/turns/{turn_id}/events',
  cancel: '/cancel',
  approvals: '/approvals',
  approve: '/approvals',
};

/** The route template of a matched request: `/{agent_id}/chat` in a registry, `/chat` for a single agent. */
export function routeTemplate(prefix: string, action: RouteAction | 'openapi', single: boolean): string {
  if (action === 'openapi') return `${prefix}/openapi.json`;
  const path = `${single ? '' : '/{agent_id}'}${ROUTE_PATHS[action]}`;
  return `${prefix}${path === '' ? '/' : path}`;
}

/**
 * A request's spans, made only with a tracer: the server span (continuing an
 * incoming `traceparent`) and, for a local turn, the turn's span under it.
 */
export class RequestSpans {
  readonly #server: TraceSpan;
  readonly #method: string;
  #turn: TraceSpan | undefined;
  /** The code of what the request failed with. */
  #code: string | undefined;
  /** What a remote call runs under: the server span. */
  readonly link: TraceLink;

  constructor(tracer: Tracer, req: IncomingMessage) {
    const method = (this.#method = req.method ?? 'GET');
    const incoming = incomingTrace(req.headers, tracer) as TraceLink;
    this.#server = startSpan(incoming, method, SPAN_KIND.server, { 'http.request.method': method });
    this.link = linkUnder(incoming, this.#server);
  }

  /** The route matched: the span is named for it (low cardinality: the template, never the agent id). */
  routed(template: string): void {
    this.#server.updateName(`${this.#method} ${template}`);
    this.#server.setAttribute('http.route', template);
  }

  /** A local turn began: its span, and the link its model and tool calls run under. */
  turnStarted(agentId: string, turnId: string, kind: 'chat' | 'action'): TraceLink {
    const attributes = { 'agent_router.agent_id': agentId, 'agent_router.turn_id': turnId, 'agent_router.turn.kind': kind };
    this.#turn = startSpan(this.link, `agent_router.turn ${kind}`, SPAN_KIND.internal, attributes);
    return linkUnder(this.link, this.#turn);
  }

  failed(error: unknown): void {
    this.#code = errorCode(error);
    if (this.#turn !== undefined) failSpan(this.#turn, error, this.#code);
  }

  /** The request was answered: a 5xx is the server span's error (a 4xx is the client's, per the HTTP conventions). */
  ended(status: number): void {
    this.#turn?.end();
    this.#server.setAttribute('http.response.status_code', status);
    if (status >= 500) failSpan(this.#server, undefined, this.#code ?? String(status));
    this.#server.end();
  }
}
