import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2';
import { Agent } from '../agent/agent.ts';
import { AgentRouterError, httpErrors } from '../errors.ts';
import { authorizeRequest } from '../http/authorize.ts';
import { awaitingContinue, JsonText, readJsonBody, untypedBody } from '../http/body.ts';
import { checkParsed } from '../lib/json.ts';
import { applyCors, checkCors } from '../http/cors.ts';
import { loggerOf } from '../lib/logger.ts';
import { lingerOnClose } from '../http/linger.ts';
import { refuseRepeatedHost } from '../http/precheck.ts';
import { decodeAgentId, splitTarget } from '../http/path.ts';
import { closeWithConnection, sendJson } from '../http/respond.ts';
import { checkChoice, checkOptions } from '../options.ts';
import { AgentRegistry } from '../registry/registry.ts';
import { AgentPool } from '../registry/pool.ts';
import { isTransport } from '../transports/transport.ts';
import { dispatch, type DispatchHost, type Target } from './dispatch.ts';
import { cancelTurn } from './cancel.ts';
import { SharedTurns } from './shared-turns.ts';
import { Exchange } from './exchange.ts';
import { buildOpenAPI, type OpenAPIDocument } from './openapi.ts';
import { ROUTER_OPTION_KINDS, type AgentRequestListener, type AgentRouterOptions, type RequestHint } from './options.ts';
import { asObject, requestIdOf, unwrapEnvelope } from './payload.ts';
import { matchRegistry, matchSingle, normalizePrefix, routeFor, stripPrefix, type RouteMatch } from './routes.ts';
import { dispatchApprovals } from './approvals.ts';
import { RunningTurns } from './running-turns.ts';
import { rejoin } from './rejoin.ts';
import { TurnLogs } from './turn-log.ts';
import { Observer } from './observe.ts';
import { tagRequest } from '../http/request-id.ts';
import { AgentTurns } from './agent-turns.ts';
import { ON_DISCONNECT, WHEN_BUSY } from '../types.ts';
import { routeTemplate } from './trace-spans.ts';

export type { Logger } from '../lib/logger.ts';
export type { AgentRequestListener, AgentRouterOptions, RequestHint } from './options.ts';
export type { TurnEndInfo, TurnStartInfo } from './observe.ts';

/** The internal entry AgentServer and the Fastify plugin answer through; see `AgentRouter[serveRequest]`. @internal */
export const serveRequest: unique symbol = Symbol('agent-router.serveRequest');

/**
 * AgentServer's close() at its deadline: `abortAll`, and the same reason for
 * every request that reaches its turn later (one still sending its body, or
 * waiting on an authorize hook). @internal
 */
export const shutTurns: unique symbol = Symbol('agent-router.shutTurns');

/** The router's turn logs (for tests of their bounds). @internal */
export const replayStore: unique symbol = Symbol('agent-router.replayStore');

/**
 * A host app behind the router (an adapter's): a path of the generic
 * route's shape asked with another method falls through to it, and `claim`
 * runs once the router owns the request.
 */
interface Host {
  /** Before anything is written or `hint.body` is read (the Fastify plugin hijacks its reply there). */
  claim?: (() => void) | undefined;
}

/** handle()'s host: it falls through, and claims nothing. */
const HOST_APP: Host = {};
const NO_HINT: RequestHint = {};

type Matched = { route: RouteMatch; query: string } | 'openapi';

/**
 * Serves one Agent or an AgentRegistry over HTTP: `POST /{agent_id}/chat`,
 * `POST /{agent_id}/invoke`, `GET /{agent_id}/state` and the generic
 * `POST /{agent_id}` (docs/reference/http-api.md).
 *
 * @example
 * http.createServer(new AgentRouter(new Agent('bot', { model: echoModel() })).toRequestListener()).listen(8000);
 */
export class AgentRouter {
  readonly prefix: string;
  readonly options: Readonly<AgentRouterOptions>;
  /** The live instances of a registry router (undefined for a single agent). */
  readonly pool: AgentPool | undefined;
  readonly #agent: Agent<any> | undefined;
  readonly #registry: AgentRegistry | undefined;
  readonly #bodyLimit: number;
  readonly #strictContentType: boolean;
  readonly #maxIdLength: number;
  readonly #maxStreams: number;
  #openStreams = 0;
  /** What requests need of the router: see DispatchHost. */
  readonly #host: DispatchHost;

  constructor(target: Agent<any> | AgentRegistry, options: AgentRouterOptions = {}) {
    if (target instanceof AgentRegistry) this.#registry = target;
    else if (target instanceof Agent) this.#agent = target;
    else throw new TypeError('AgentRouter: the first argument must be an Agent or an AgentRegistry');
    checkOptions(options, ROUTER_OPTION_KINDS, 'AgentRouter');
    if (options.cors !== undefined) checkCors(options.cors, 'AgentRouter');
    checkChoice(options.onDisconnect, ON_DISCONNECT, 'AgentRouter: onDisconnect');
    checkChoice(options.whenBusy, WHEN_BUSY, 'AgentRouter: whenBusy');
    this.options = options;
    this.prefix = normalizePrefix(options.prefix);
    this.#bodyLimit = options.bodyLimit ?? 1024 * 1024;
    this.#strictContentType = options.strictContentType ?? true;
    this.#maxIdLength = options.maxIdLength ?? 256;
    this.#maxStreams = options.maxStreams ?? 10_000;
    this.pool = this.#registry === undefined ? undefined : (options.pool ?? new AgentPool(options));
    const turnTimeout = options.turnTimeout ?? 300;
    const turns = new RunningTurns<Exchange>(turnTimeout, (exchange) => {
      const message = exchange.reading
        ? `The state read did not complete within ${turnTimeout} s`
        : `The turn did not complete within ${turnTimeout} s (waiting behind the agent's earlier turns included)`;
      exchange.cancel?.abort(new AgentRouterError(504, 'turn_timeout', message, { expose: true }));
    });
    const logger = loggerOf(options.logger);
    const replays = new TurnLogs(options.replayTTL ?? 300, options.replayLimit ?? 1024 * 1024, options.now);
    const observed = options.onTurnStart !== undefined || options.onTurnEnd !== undefined || options.metrics === true;
    const observer = observed ? new Observer(options, logger, { liveAgents: () => this.pool?.size ?? 1, openStreams: () => this.#openStreams }) : undefined;
    const agentTurns = new AgentTurns<Exchange>();
    this.#host = {
      observer,
      tracer: options.tracer,
      agentTurns,
      replays,
      shared: new SharedTurns(agentTurns, logger, options.replayTTL ?? 300),
      keepOnDisconnect: options.onDisconnect === 'continue',
      busy: { whenBusy: options.whenBusy ?? 'enqueue', maxQueue: options.maxQueue ?? Infinity },
      logger,
      // A client that reads nothing for turnTimeout is taken as gone.
      unreadMs: turnTimeout > 0 ? turnTimeout * 1000 : Infinity,
      turns,
      timing: turns.timing,
      shut: undefined,
      streamOptions: { pingInterval: options.pingInterval, stallTimeout: turnTimeout, logger, replays },
      streamClosed: () => {
        this.#openStreams--;
      },
      release: (agentId) => this.pool?.release(agentId),
      checkStreams: () => {
        if (this.#openStreams >= this.#maxStreams) throw this.#tooManyStreams();
      },
      openStream: () => {
        this.#openStreams++;
      },
      resolve: (agentId, req, keep) => this.#resolve(agentId, req, keep),
    };
  }

  /** A `(req, res)` listener for `http.createServer` (or node:http2's); paths that are not the router's get 404 JSON. */
  toRequestListener(): AgentRequestListener {
    const listener: RequestListener = (req, res) => {
      if (refuseRepeatedHost(req, res)) return;
      if (this.#serve(req, res, NO_HINT, undefined, undefined)) return;
      try {
        // A page on an allowed origin can read this 404 too, as it can the router's own answers.
        if (this.options.cors !== undefined && applyCors(this.options.cors, req, res, 'GET, POST')) return;
      } catch (error) {
        return new Exchange(this.#host, req, res, undefined, undefined).fail(error);
      }
      lingerOnClose(req, res);
      tagRequest(req, res);
      this.#host.observer?.requestDone('none', 404);
      sendJson(res, 404, { error: `No route for ${req.method} ${req.url}`, code: 'not_found' });
    };
    // The router reads and writes only what both APIs' requests and responses have (tested over each).
    return listener as AgentRequestListener;
  }

  /**
   * Answers the request if its path is one of the router's routes and
   * resolves true once answered; resolves false (having written nothing)
   * otherwise, so a host app can fall through. `hint.path` replaces
   * `req.url` (an adapter's mount-relative path), `hint.body` is a body a
   * framework already parsed, `hint.signal` aborts the request's turn (a
   * server shutting down: the turn fails with the signal's reason, a stream
   * ends with `event: error`). Never rejects: failures are answered as JSON.
   * Takes node:http2's compatibility request and response too.
   */
  handle(req: IncomingMessage, res: ServerResponse, hint?: RequestHint): Promise<boolean>;
  handle(req: Http2ServerRequest, res: Http2ServerResponse, hint?: RequestHint): Promise<boolean>;
  handle(req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse, hint: RequestHint = {}): Promise<boolean> {
    const [request, response] = [req as IncomingMessage, res as ServerResponse];
    return new Promise<boolean>((resolve) => {
      if (!this.#serve(request, response, hint, () => resolve(true), HOST_APP)) resolve(false);
    });
  }

  /**
   * Internal (AgentServer, the Fastify plugin): `handle` with a callback
   * instead of a promise. False for a path that is not the router's (nothing
   * written); else true, and `answered` is called once the request is
   * answered (a stream: once it ended). With a `host`, it falls through as
   * handle() does, and `host.claim` runs once the path matched.
   * @internal
   */
  [serveRequest](req: IncomingMessage, res: ServerResponse, answered: (() => void) | undefined, hint: RequestHint = NO_HINT, host?: Host): boolean {
    return this.#serve(req, res, hint, answered, host);
  }

  /** Starts answering a request on one of the router's routes (true), or writes nothing for any other path (false). */
  #serve(req: IncomingMessage, res: ServerResponse, hint: RequestHint, answered: (() => void) | undefined, host: Host | undefined): boolean {
    const matched = this.#match(req.method, hint.path ?? req.url ?? '/', host !== undefined);
    if (matched === undefined) return false;
    closeWithConnection(req, res);
    lingerOnClose(req, res);
    const exchange = new Exchange(this.#host, req, res, hint.signal, answered);
    void this.#run(exchange, matched, hint, host);
    return true;
  }

  /** A matched request's steps: CORS, method, id, authorize, body, then its action. Never rejects. */
  async #run(exchange: Exchange, matched: Matched, hint: RequestHint, host: Host | undefined): Promise<void> {
    const { req, res } = exchange;
    try {
      host?.claim?.();
      if (this.#host.observer !== undefined || exchange.spans !== undefined) exchange.route = matched === 'openapi' ? 'openapi' : matched.route.action;
      exchange.spans?.routed(routeTemplate(this.prefix, matched === 'openapi' ? 'openapi' : matched.route.action, this.#agent !== undefined));
      if (matched === 'openapi') {
        this.#serveDocument(exchange, hint.path);
        return exchange.done();
      }
      const { query } = matched;
      // Inside the try: a CORS origin predicate is user code.
      if (this.options.cors !== undefined) {
        exchange.headersNow();
        if (applyCors(this.options.cors, req, res, matched.route.method)) return exchange.done();
      }
      // HEAD is GET without the body (Node leaves it out): health checks and probes use it.
      const route = routeFor(matched.route, req.method);
      if (route === undefined) throw httpErrors.methodNotAllowed(matched.route.method.replace('GET', 'GET, HEAD'));
      exchange.agentId = route.segment === undefined ? (this.#agent as Agent<any>).id : decodeAgentId(route.segment, this.#maxIdLength);
      exchange.query = query;
      const authorize = this.options.authorize;
      if (route.action === 'events') {
        if (authorize !== undefined) await authorizeRequest(authorize, req, exchange.agentId, 'read');
        await rejoin(this.#host, exchange, route.turn as string);
        return;
      }
      let action = route.action;
      if (authorize !== undefined && action !== 'request') await authorizeRequest(authorize, req, exchange.agentId, action === 'approvals' ? 'read' : action);
      let body = route.method === 'POST' ? this.#body(exchange, hint.body) : {};
      // Awaited only when read here: a body a framework parsed is dispatched in this same tick.
      if (body instanceof Promise) body = await body;
      if (action === 'request') {
        // The generic envelope: authorize is asked about the action it carries.
        const envelope = unwrapEnvelope(body);
        if (authorize !== undefined) await authorizeRequest(authorize, req, exchange.agentId, envelope.action);
        action = envelope.action;
        body = envelope.body;
      }
      if (action === 'cancel') return cancelTurn(this.#host, exchange, this.#registry?.resolve(exchange.agentId), turnIdIn(body));
      if (action === 'approvals' || action === 'approve') return dispatchApprovals(this.#host, exchange, action, body);
      dispatch(this.#host, exchange, action, body);
    } catch (error) {
      exchange.fail(error);
    }
  }

  /** A POST's JSON body, read here or parsed already by a host's framework, as the headers declare it. */
  #body({ req, agentId }: Exchange, parsed: unknown): Record<string, unknown> | Promise<Record<string, unknown>> {
    if (this.#strictContentType && untypedBody(req)) throw httpErrors.untypedBody();
    if (parsed instanceof JsonText) return asObject(parsed.parse(this.#bodyLimit));
    if (parsed !== undefined) return asObject(checkParsed(parsed));
    // A client holding its body back for `100 Continue` gets the refusal for an id no pattern matches instead.
    if (awaitingContinue(req)) this.#registry?.resolve(agentId);
    return readJsonBody(req, this.#bodyLimit).then((body) => asObject(body));
  }

  /**
   * True when `handle` would answer this request itself (the path is one of
   * the router's routes, under its prefix), false when it would fall
   * through. For adapters that must decide before anything is written.
   */
  matches(method: string | undefined, target: string): boolean {
    return this.#match(method, target, true) !== undefined;
  }

  /**
   * The route a request is for. `hosted`: a host app stands behind the
   * router, so a path of the generic route's shape is the router's only for
   * a POST, or a preflight when the router answers those (`/health` or
   * `/favicon.ico` under the mount are the host's). Alone, the router
   * answers any other method there with 405.
   */
  #match(method: string | undefined, target: string, hosted: boolean): Matched | undefined {
    const { path, query } = splitTarget(target);
    const rest = stripPrefix(path, this.prefix);
    if (rest === undefined) return undefined;
    if (this.options.openapi === true && rest === '/openapi.json') {
      // In a registry, a POST there is the generic route of an agent named "openapi.json", as it always was.
      if (method === 'GET' || method === 'HEAD' || (method === 'OPTIONS' && this.options.cors !== undefined)) return 'openapi';
      if (!hosted && (method !== 'POST' || this.#agent !== undefined)) return 'openapi';
    }
    const route = this.#agent === undefined ? matchRegistry(rest) : matchSingle(rest);
    if (route === undefined) return undefined;
    if (hosted && route.action === 'request' && method !== 'POST' && !(method === 'OPTIONS' && this.options.cors !== undefined)) return undefined;
    return { route, query };
  }

  /**
   * `{prefix}/openapi.json`: the document for GET and HEAD, under the same
   * CORS rules as the routes it describes, and a 405 naming what the path
   * takes for any other method.
   */
  #serveDocument(exchange: Exchange, routedPath: string | undefined): void {
    const { req, res } = exchange;
    const methods = this.#agent === undefined ? 'GET, HEAD, POST' : 'GET, HEAD';
    if (this.options.cors !== undefined) {
      exchange.headersNow();
      if (applyCors(this.options.cors, req, res, methods.replace(', HEAD', ''))) return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') throw httpErrors.methodNotAllowed(methods);
    const document = this.openapi();
    // A docs page (Swagger UI) sends its requests under the document's server: without the host's mount path they would miss.
    const mount = mountPathOf(req, routedPath);
    if (mount !== '') document.servers = [{ url: mount }];
    sendJson(res, 200, document, exchange.headers);
  }

  /** The router's routes as an OpenAPI 3.1 document, with its `tags` and `responses` options; a fresh object each call. */
  openapi(): OpenAPIDocument {
    const { tags, responses, maxIdLength, openapi, maxQueue } = this.options;
    return buildOpenAPI({ prefix: this.prefix, agentId: this.#agent?.id, maxIdLength, servesDocument: openapi, tags, responses, maxQueue });
  }

  /**
   * Aborts every request running now with `reason` (an AgentRouterError
   * picks the status): JSON requests answer it, streams end with
   * `event: error`, and their turns change nothing. AgentServer's close()
   * calls it at its deadline.
   */
  abortAll(reason: unknown): void {
    for (const exchange of this.#host.turns.list()) exchange.cancel?.abort(reason);
  }

  /** See `shutTurns`. @internal */
  [shutTurns](reason: unknown): void {
    this.#host.shut = { reason };
    this.abortAll(reason);
  }

  /** See `replayStore`. @internal */
  get [replayStore](): TurnLogs {
    return this.#host.replays;
  }

  /**
   * The router's metrics in the Prometheus text format (0.0.4), for a host
   * app to serve (Content-Type `text/plain; version=0.0.4`); needs the
   * `metrics` option.
   */
  metrics(): string {
    const registry = this.#host.observer?.registry;
    if (registry === undefined) throw new TypeError('AgentRouter.metrics(): set the metrics option to true to count them');
    return registry.text();
  }

  /** Open SSE streams now. */
  get openStreams(): number {
    return this.#openStreams;
  }

  #tooManyStreams(): AgentRouterError {
    return new AgentRouterError(503, 'too_many_streams', `All ${this.#maxStreams} streams are in use; retry shortly`, {
      expose: true,
      headers: { 'Retry-After': '1' },
    });
  }

  #resolve(agentId: string, req: IncomingMessage, keep = true): Target {
    if (this.#agent !== undefined) return { agent: this.#agent, pooled: false };
    const target = (this.#registry as AgentRegistry).resolve(agentId);
    if (isTransport(target)) return { transport: target, requestId: requestIdOf(req), requestHeaders: req.headers };
    if (!keep) return { agent: this.pool?.peek(agentId) ?? new target(agentId), pooled: false };
    return { agent: (this.pool as AgentPool).acquire(agentId, (id) => new target(id)), pooled: true };
  }
}

/** A cancel's `turn_id`, if it names one. */
function turnIdIn(body: Record<string, unknown>): string | undefined {
  const turnId = body['turn_id'];
  if (turnId === undefined || turnId === null) return undefined;
  if (typeof turnId !== 'string' || turnId === '') throw httpErrors.badRequest('invalid_body', 'Cancel takes {"turn_id": "<Turn-Id>"}, or no body for the running turn');
  return turnId;
}

/**
 * Where a host app mounted the router (Express's `app.use('/api', ...)`), as
 * one request shows it: the path the client asked less the path the host
 * handed the router; empty when the two do not line up.
 */
function mountPathOf(req: IncomingMessage, routedPath: string | undefined): string {
  if (routedPath === undefined) return '';
  const originalUrl = (req as { originalUrl?: unknown }).originalUrl;
  const asked = splitTarget(typeof originalUrl === 'string' ? originalUrl : (req.url ?? '/')).path;
  const routed = splitTarget(routedPath).path;
  return asked.length > routed.length && asked.endsWith(routed) ? asked.slice(0, asked.length - routed.length) : '';
}
