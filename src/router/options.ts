import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2';
import type { RequestListener } from 'node:http';
import type { Authorize } from '../http/authorize.ts';
import type { CorsOptions } from '../http/cors.ts';
import type { Logger } from '../lib/logger.ts';
import type { Tracer } from '../lib/trace.ts';
import type { OptionKind } from '../options.ts';
import type { OnDisconnect, WhenBusy } from '../types.ts';
import type { TurnEndInfo, TurnHook, TurnStartInfo } from './observe.ts';
import type { AgentPool, AgentPoolOptions } from '../registry/pool.ts';

export interface AgentRouterOptions extends AgentPoolOptions {
  /** Mount path prepended to every route, e.g. `/agents`. */
  prefix?: string | undefined;
  /** OpenAPI tags for the router's operations (as ai-query's router takes it). */
  tags?: readonly string[] | undefined;
  /** Extra OpenAPI responses by status code (as ai-query's router takes it). */
  responses?: Readonly<Record<string, { description: string }>> | undefined;
  /** Serve `router.openapi()` at `GET {prefix}/openapi.json`. @defaultValue false */
  openapi?: boolean | undefined;
  /** Largest request body in bytes; Infinity for no limit. @defaultValue 1 MiB */
  bodyLimit?: number | undefined;
  /**
   * Refuse (415) a request body sent with no Content-Type. A browser page on
   * any site can send one without a CORS preflight (`fetch` with a Blob
   * body), so accepting it as JSON lets any site drive an agent on
   * localhost or behind a cookie. `false` takes such a body as JSON, for
   * clients that send none. @defaultValue true
   */
  strictContentType?: boolean | undefined;
  /** Longest agent id in characters, checked before any pattern runs. @defaultValue 256 */
  maxIdLength?: number | undefined;
  /** Seconds between `: ping` comments on an idle stream; 0 turns them off. @defaultValue 15 */
  pingInterval?: number | undefined;
  /** Seconds a turn may take before it is aborted (504), counted from when the request asks for it: waiting behind the agent's earlier turns counts. Also how long a state read that asks storage may take, and how long a client may leave an answer (a stream, a JSON reply) unread before it is closed. 0 or Infinity for no limit. @defaultValue 300 */
  turnTimeout?: number | undefined;
  /** Runs before any agent is touched; see {@link Authorize}. */
  authorize?: Authorize | undefined;
  /** Cross-origin access for browsers. @defaultValue off */
  cors?: CorsOptions | undefined;
  /** Open SSE streams at most (Infinity: no limit); beyond it a stream request gets 503. @defaultValue 10000 */
  maxStreams?: number | undefined;
  /** Where 5xx details go (never to the client). @defaultValue console */
  logger?: Logger | undefined;
  /**
   * What a turn does when its client leaves: `cancel` it (nothing is stored), or `continue` to its end and
   * commit, so the client can rejoin its stream. Per request: `?on_disconnect=`. @defaultValue 'cancel'
   */
  onDisconnect?: OnDisconnect | undefined;
  /**
   * What a chat or invoke turn does when the agent runs or queues one (in this process, or in another sharing its storage with `shareTurns`):
   * `enqueue` waits its turn, `reject` answers 409 `agent_busy`, `interrupt` cancels the turns ahead
   * and runs. Per request: `?when_busy=`. @defaultValue 'enqueue'
   */
  whenBusy?: WhenBusy | undefined;
  /** Turns that may wait per agent (in this process) behind the running one; past it 429 `queue_full`. @defaultValue Infinity */
  maxQueue?: number | undefined;
  /** Seconds a finished streamed turn can still be rejoined (`GET .../turns/{turn_id}/events`), in full. @defaultValue 300 */
  replayTTL?: number | undefined;
  /** Bytes of a streamed turn's events kept for rejoins; past it the oldest go (a rejoin asking for them gets 410). @defaultValue 1 MiB */
  replayLimit?: number | undefined;
  /** Called as a local turn is asked for (before it waits for the agent); not awaited, a throw or rejection is logged. */
  onTurnStart?: TurnHook<TurnStartInfo> | undefined;
  /** Called once a local turn ended (done, failed, cancelled), with its timing and usage; not awaited, a throw or rejection is logged. */
  onTurnEnd?: TurnHook<TurnEndInfo> | undefined;
  /** Count turns, tokens and requests for `router.metrics()` (AgentServer: serve them at `GET /metrics`). @defaultValue false */
  metrics?: boolean | undefined;
  /**
   * An OpenTelemetry tracer (`trace.getTracer('my-app')` of `@opentelemetry/api`, or anything shaped like it):
   * spans for each request, turn, model call, tool call and remote call, parents passed explicitly. @defaultValue off
   */
  tracer?: Tracer | undefined;
  /** Share an existing pool (AgentServer does); otherwise the router makes its own from these options. */
  pool?: AgentPool | undefined;
}

/** Every router option, and how it is checked (typed so a new option cannot be forgotten here). @internal */
export const ROUTER_OPTION_KINDS: { readonly [K in keyof Required<AgentRouterOptions>]: OptionKind } = {
  prefix: 'path',
  tags: 'strings',
  responses: 'object',
  openapi: 'boolean',
  bodyLimit: 'limit',
  strictContentType: 'boolean',
  maxIdLength: 'positiveCount',
  pingInterval: 'seconds',
  turnTimeout: 'limitSeconds',
  authorize: 'function',
  cors: 'cors',
  maxStreams: 'limit',
  logger: 'logger',
  pool: 'object',
  onTurnStart: 'function',
  onTurnEnd: 'function',
  metrics: 'boolean',
  tracer: 'object',
  onDisconnect: 'string',
  whenBusy: 'string',
  maxQueue: 'limit',
  replayTTL: 'seconds',
  replayLimit: 'limit',
  idleTimeout: 'idleSeconds',
  maxAgents: 'positiveCount',
  onCreate: 'function',
  onEvict: 'function',
  now: 'function',
};

/**
 * What `toRequestListener()` returns: a listener for `http.createServer`, and
 * for node:http2's compatibility API (`http2.createSecureServer({ allowHTTP1:
 * true }, listener)`), whose request and response it serves the same way.
 */
export type AgentRequestListener = RequestListener & ((req: Http2ServerRequest, res: Http2ServerResponse) => void);

/** What an adapter or a server may tell `handle` about a request. */
export interface RequestHint {
  /** The path to route (mount-relative), instead of `req.url`. */
  path?: string | undefined;
  /** A body a framework already parsed; the request stream is then not read. */
  body?: unknown;
  /** Aborts the request's turn, e.g. on server shutdown. */
  signal?: AbortSignal | undefined;
}

