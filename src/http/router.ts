import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2';
import { Agent, cancelledBy, chatInto, committedState, type ChatSink } from '../agent/agent.ts';
import { TurnCancel } from '../agent/cancel.ts';
import { stopWatching, whenAborted } from '../signal-watch.ts';
import { AgentRouterError, httpErrors, statusOf, worthLogging } from '../errors.ts';
import { AgentRegistry } from '../registry/registry.ts';
import { AgentPool, type AgentPoolOptions } from '../server/pool.ts';
import { chatReply, HTTPTransport } from '../transports/http.ts';
import { isTransport, type AgentTransport } from '../transports/transport.ts';
import { checkOptions, type OptionKind } from '../options.ts';
import type { JsonObject } from '../types.ts';
import { authorizeRequest, type Authorize } from './authorize.ts';
import { awaitingContinue, checkParsed, JsonText, readJsonBody, streamReset, untypedBody } from './body.ts';
import { applyCors, checkCors, type CorsOptions } from './cors.ts';
import { refuseRepeatedHost } from './precheck.ts';
import { decodeAgentId, parseStreamFlag, queryParam, splitTarget } from './path.ts';
import { asObject, invokePayload, requestIdOf, requireMessage, unwrapEnvelope } from './payload.ts';
import { lingerOnClose } from './linger.ts';
import { closeWithConnection, sendError, sendJson } from './respond.ts';
import { buildOpenAPI, type OpenAPIDocument } from './openapi.ts';
import { loggerOf, type Logger } from './logger.ts';
import { matchRegistry, matchSingle, normalizePrefix, stripPrefix, type RouteAction, type RouteMatch } from './routes.ts';
import { RunningTurns, type RunningTurn } from './running-turns.ts';
import { streamReply, type ReplySource, type StreamEnd } from './stream.ts';
import { cutIfLeftUnread } from './unread.ts';

export type { Logger } from './logger.ts';

export interface AgentRouterOptions extends AgentPoolOptions {
  /** Mount path prepended to every route, e.g. `/agents`. */
  prefix?: string | undefined;
  /** OpenAPI tags for the router's operations (the spec's kwarg). */
  tags?: readonly string[] | undefined;
  /** Extra OpenAPI responses by status code (the spec's kwarg). */
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

/** The internal entry AgentServer and the Fastify plugin answer through; see `AgentRouter[serveRequest]`. @internal */
export const serveRequest: unique symbol = Symbol('agent-router.serveRequest');

/**
 * AgentServer's close() at its deadline: `abortAll`, and the same reason for
 * every request that reaches its turn later (one still sending its body, or
 * waiting on an authorize hook), which would otherwise start a turn after the
 * deadline. @internal
 */
export const shutTurns: unique symbol = Symbol('agent-router.shutTurns');

/** What an action returns when it answered synchronously: #follow calls `answered` at once. */
const ANSWERED: unique symbol = Symbol('answered');
/** What a JSON action or a stream returns once started: it calls `answered` itself when it is over. */
const ANSWERS_ITSELF: unique symbol = Symbol('answers itself');
/**
 * What the steps of a request return: a promise only where one is waited on
 * (authorize, a snapshot from storage), else whether it is answered already
 * or answers itself. A JSON request is not a chain of promises from its body
 * to its reply: each link would cost a promise and a microtask hop, and a
 * promise returned from a `then` callback is adopted by the outer one, two
 * hops more.
 */
type Started = Promise<unknown> | typeof ANSWERED | typeof ANSWERS_ITSELF;
const NO_HINT: RequestHint = {};

/**
 * A host app behind the router (an adapter's): a path of the generic
 * route's shape asked with another method falls through to it (see #match),
 * and `claim` runs once the router owns the request.
 */
interface Host {
  /** Before anything is written or `hint.body` is read (the Fastify plugin hijacks its reply there). */
  claim?: (() => void) | undefined;
}

/** handle()'s host: it falls through, and claims nothing. */
const HOST_APP: Host = {};

/** One request on its way to an agent: what every step after the path match needs. */
interface Exchange {
  req: IncomingMessage;
  res: ServerResponse;
  agentId: string;
  query: string;
  /** Aborts the request's turn (RequestHint.signal). */
  signal: AbortSignal | undefined;
  /** Called once the request is answered, if the caller waits for that. */
  answered: (() => void) | undefined;
}

/** A request's turn in flight: what #settle undoes once it is answered; linked into the router's RunningTurns. */
interface Running extends RunningTurn {
  readonly res: ServerResponse;
  readonly agentId: string;
  readonly cancel: TurnCancel;
  /** The agent is the pool's, to give back at the end. */
  readonly pooled: boolean;
  /** Cuts the turn when the client leaves. */
  readonly onClose: () => void;
  /** The hint's signal, and what listens to it. */
  readonly outer: AbortSignal | undefined;
  onOuterAbort: (() => void) | undefined;
  /** Counted in openStreams. */
  streaming: boolean;
  /** A stream's or a JSON action's: called once it is over, if the caller waits for that. */
  answered: (() => void) | undefined;
  /** A state read (no turn): its timeout says so. */
  reading: boolean;
}

/**
 * A 'close' listener that cuts the turn if the response was not ended; made
 * apart so its closure holds these two only. Not `writableFinished`: node:http2's
 * compatibility response reports it once a cancelled stream closes, ended or not.
 */
function cutOnClose(res: ServerResponse, cancel: TurnCancel): () => void {
  return () => {
    if (!res.writableEnded) cancel.abort(new AgentRouterError(499, 'client_closed', 'Client closed the connection'));
  };
}

/**
 * Where a host app mounted the router (Express's `app.use('/api', ...)`, a
 * Fastify plugin prefix), as one request shows it: the path the client asked
 * (Express keeps it as `originalUrl`) less the path the host handed the
 * router. Empty when the router was handed the whole path, or when the two
 * do not line up (a host that rewrote the path).
 */
function mountPathOf(req: IncomingMessage, routedPath: string | undefined): string {
  if (routedPath === undefined) return '';
  const originalUrl = (req as { originalUrl?: unknown }).originalUrl;
  const asked = splitTarget(typeof originalUrl === 'string' ? originalUrl : (req.url ?? '/')).path;
  const routed = splitTarget(routedPath).path;
  return asked.length > routed.length && asked.endsWith(routed) ? asked.slice(0, asked.length - routed.length) : '';
}

/**
 * A local agent's JSON chat turn reports here (Agent's ChatSink), as a
 * stream's turn reports to its stream: the reply is sent from the turn's own
 * callback, with no promise between (chat()'s, and one for each step after it).
 */
class ChatReply implements ChatSink {
  readonly #running: Running;
  readonly #reply: (running: Running, reply: JsonObject) => void;
  readonly #end: StreamEnd<Running>;

  constructor(running: Running, reply: (running: Running, reply: JsonObject) => void, end: StreamEnd<Running>) {
    this.#running = running;
    this.#reply = reply;
    this.#end = end;
  }

  done(text: string, truncated: boolean): void {
    const agentId = this.#running.agentId;
    this.#reply(this.#running, truncated ? { agent_id: agentId, response: text, truncated } : { agent_id: agentId, response: text });
  }

  failed(error: unknown): void {
    this.#end(this.#running, { error });
  }
}

/** Where a request lands: a local instance or a remote transport. */
type Resolved = { agent: Agent<any>; pooled: boolean } | { transport: AgentTransport; requestId: string | undefined; requestHeaders: IncomingMessage['headers'] };

/** The target is the pool's instance, to give back when the request ends. */
function isPooled(target: Resolved): boolean {
  return 'agent' in target && target.pooled;
}

/**
 * Serves one Agent or an AgentRegistry over HTTP (DESIGN.md sections 2, 3).
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
  readonly #turnTimeout: number;
  /** How long a client may leave an answer unread (a stream's stall rule, turnTimeout): Infinity for no limit. */
  readonly #unreadMs: number;
  readonly #logger: Logger;
  readonly #maxStreams: number;
  #openStreams = 0;
  /** Set by `[shutTurns]`: why no turn may begin any more. */
  #shut: { reason: unknown } | undefined;
  /** The requests running now, for abortAll() and the turn timeout. */
  readonly #turns: RunningTurns<Running>;

  /** A local JSON chat's reply (see ChatReply): one function for all of them. */
  readonly #onReply = (running: Running, reply: JsonObject): void => this.#reply(running, reply);

  /**
   * The end of every request that answers itself (a stream, a JSON action), handed its Running: one
   * function for all of them. `refused`: not answered yet, answer it as this failure.
   */
  readonly #onEnd: StreamEnd<Running> = (running, refused) => {
    try {
      this.#settle(running);
      const cancel = running.cancel;
      if (refused !== undefined) this.#fail(running.res, cancel.aborted ? cancel.reason : refused.error);
    } finally {
      // Once, and never thrown into what ended the request: the agent's turn or a cancel.abort() (a client
      // leaving, the turn timeout, abortAll) would meet the host's exception, and #dispatch would settle twice.
      const answered = running.answered;
      running.answered = undefined;
      try {
        answered?.();
      } catch (error) {
        this.#logger.error("AgentRouter: the host's callback for an answered request threw", error);
      }
    }
  };

  constructor(target: Agent<any> | AgentRegistry, options: AgentRouterOptions = {}) {
    if (target instanceof AgentRegistry) this.#registry = target;
    else if (target instanceof Agent) this.#agent = target;
    else throw new TypeError('AgentRouter: the first argument must be an Agent or an AgentRegistry');
    checkOptions(options, ROUTER_OPTION_KINDS, 'AgentRouter');
    if (options.cors !== undefined) checkCors(options.cors, 'AgentRouter');
    this.options = options;
    this.prefix = normalizePrefix(options.prefix);
    this.#bodyLimit = options.bodyLimit ?? 1024 * 1024;
    this.#strictContentType = options.strictContentType ?? true;
    this.#maxIdLength = options.maxIdLength ?? 256;
    this.#turnTimeout = options.turnTimeout ?? 300;
    this.#unreadMs = this.#turnTimeout > 0 ? this.#turnTimeout * 1000 : Infinity;
    this.#maxStreams = options.maxStreams ?? 10_000;
    const turnTimeout = this.#turnTimeout;
    this.#turns = new RunningTurns(turnTimeout, (running) => {
      const message = running.reading
        ? `The state read did not complete within ${turnTimeout} s`
        : `The turn did not complete within ${turnTimeout} s (waiting behind the agent's earlier turns included)`;
      running.cancel.abort(new AgentRouterError(504, 'turn_timeout', message, { expose: true }));
    });
    this.#logger = loggerOf(options.logger);
    this.pool = this.#registry === undefined ? undefined : (options.pool ?? new AgentPool(options));
  }

  /** A `(req, res)` listener for `http.createServer` (or node:http2's); paths that are not the router's get 404 JSON. */
  toRequestListener(): AgentRequestListener {
    const listener: RequestListener = (req, res) => {
      if (refuseRepeatedHost(req, res)) return;
      // Nothing waits here: #serve answers its own failures, and a held stream keeps nothing of this call.
      if (this.#serve(req, res, NO_HINT, undefined, undefined)) return;
      try {
        // A page on an allowed origin can read this 404 too, as it can the router's own answers.
        if (this.options.cors !== undefined && applyCors(this.options.cors, req, res, 'GET, POST')) return;
      } catch (error) {
        return this.#fail(res, error);
      }
      lingerOnClose(req, res);
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
   * Takes node:http2's compatibility request and response too, as
   * `toRequestListener()` does.
   */
  handle(req: IncomingMessage, res: ServerResponse, hint?: RequestHint): Promise<boolean>;
  handle(req: Http2ServerRequest, res: Http2ServerResponse, hint?: RequestHint): Promise<boolean>;
  handle(req: IncomingMessage | Http2ServerRequest, res: ServerResponse | Http2ServerResponse, hint: RequestHint = {}): Promise<boolean> {
    // The router reads and writes only what both APIs' requests and responses have, as toRequestListener's cast says.
    const [request, response] = [req as IncomingMessage, res as ServerResponse];
    return new Promise<boolean>((resolve) => {
      if (!this.#serve(request, response, hint, () => resolve(true), HOST_APP)) resolve(false);
    });
  }

  /**
   * Internal (AgentServer, the Fastify plugin): `handle` with a callback
   * instead of a promise. False for a path that is not the router's (nothing
   * written); else true, and `answered` is called once the request is
   * answered (a stream: once it ended). Without `host` (AgentServer) the
   * router owns every path of its routes' shapes, as toRequestListener does;
   * with one, it falls through as handle() does, and `host.claim` runs once
   * the path matched, before anything is written or `hint.body` is read (the
   * Fastify plugin hijacks its reply there),
   * so the plugin need not match the path first with matches().
   * @internal
   */
  [serveRequest](req: IncomingMessage, res: ServerResponse, answered: (() => void) | undefined, hint: RequestHint = NO_HINT, host?: Host): boolean {
    return this.#serve(req, res, hint, answered, host);
  }

  /**
   * Starts answering a request on one of the router's routes: true, and
   * `answered` is called once it is answered (failures included: they are
   * answered as JSON); false, having written nothing, for any other path.
   * Not an async function: the steps are chained only where they wait
   * (authorize, the body), so a GET takes no promise before its agent is
   * reached, and a stream ends through callbacks, keeping no promise.
   */
  #serve(req: IncomingMessage, res: ServerResponse, hint: RequestHint, answered: (() => void) | undefined, host: Host | undefined): boolean {
    const matched = this.#match(req.method, hint.path ?? req.url ?? '/', host !== undefined);
    if (matched === undefined) return false;
    closeWithConnection(req, res);
    lingerOnClose(req, res);
    let started: Started;
    try {
      host?.claim?.();
      if (matched === 'openapi') {
        this.#serveDocument(req, res, hint.path);
        answered?.();
        return true;
      }
      const { route, query } = matched;
      // Inside the try: a CORS origin predicate is user code, and a listener that throws would take the process down.
      if (this.options.cors !== undefined && applyCors(this.options.cors, req, res, route.method)) {
        answered?.();
        return true;
      }
      // HEAD is GET without the body (Node leaves it out): health checks and probes use it.
      if (req.method !== route.method && !(req.method === 'HEAD' && route.method === 'GET')) {
        throw httpErrors.methodNotAllowed(route.method === 'GET' ? 'GET, HEAD' : route.method);
      }
      const agentId = route.segment === undefined ? (this.#agent as Agent<any>).id : decodeAgentId(route.segment, this.#maxIdLength);
      const exchange: Exchange = { req, res, agentId, query, signal: hint.signal, answered };
      const authorize = this.options.authorize;
      const action = route.action;
      started = authorize !== undefined && action !== 'request'
        ? authorizeRequest(authorize, req, agentId, action).then(() => this.#withBody(exchange, action, route.method, hint.body))
        : this.#withBody(exchange, action, route.method, hint.body);
    } catch (error) {
      this.#fail(res, error);
      answered?.();
      return true;
    }
    this.#follow(started, res, answered);
    return true;
  }

  /** Answers what `started` leaves unanswered: its failure, and `answered` once it is over. */
  #follow(started: Started, res: ServerResponse, answered: (() => void) | undefined): void {
    // Answered already (a state read from memory), or answering itself: nothing to chain.
    if (started === ANSWERED) return answered?.();
    if (started === ANSWERS_ITSELF) return;
    const serving = started.then(undefined, (error: unknown) => this.#fail(res, error));
    // A JSON action or a stream calls `answered` itself when it is over.
    if (answered !== undefined) serving.then((outcome) => outcome === ANSWERS_ITSELF || answered());
  }

  /** The request's body (a POST's), then its action. */
  #withBody(exchange: Exchange, action: RouteAction, method: RouteMatch['method'], parsed: unknown): Started {
    if (method !== 'POST') return this.#withPayload(exchange, action, {});
    // Whoever read the body (this router or a host's parser), as the headers declare it.
    if (this.#strictContentType && untypedBody(exchange.req)) return Promise.reject(httpErrors.untypedBody());
    if (parsed instanceof JsonText) return this.#withPayload(exchange, action, asObject(parsed.parse(this.#bodyLimit)));
    if (parsed !== undefined) return this.#withPayload(exchange, action, asObject(checkParsed(parsed)));
    // Followed from the body's own reaction, not chained to by #serve: that would be a promise and a hop more.
    const { res, answered } = exchange;
    // A client holding its body back for `100 Continue` gets a refusal for an id no pattern matches instead.
    if (awaitingContinue(exchange.req)) this.#registry?.resolve(exchange.agentId);
    readJsonBody(exchange.req, this.#bodyLimit).then(
      (body) => {
        let started: Started;
        try {
          started = this.#withPayload(exchange, action, asObject(body));
        } catch (error) {
          this.#fail(res, error);
          return answered?.();
        }
        this.#follow(started, res, answered);
      },
      (error: unknown) => {
        this.#fail(res, error);
        answered?.();
      },
    );
    return ANSWERS_ITSELF;
  }

  /** Opens the generic envelope (asking `authorize` about the action it carries), then dispatches. */
  #withPayload(exchange: Exchange, action: RouteAction, body: Record<string, unknown>): Started {
    if (action !== 'request') return this.#dispatch(exchange, action, body);
    const envelope = unwrapEnvelope(body);
    const authorize = this.options.authorize;
    if (authorize === undefined) return this.#dispatch(exchange, envelope.action, envelope.body);
    return authorizeRequest(authorize, exchange.req, exchange.agentId, envelope.action).then(() => this.#dispatch(exchange, envelope.action, envelope.body));
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
   * router, so a path of the generic route's shape (`/{agent_id}`, or `/`
   * of a single agent) is the router's only for a POST, or for a preflight
   * when the router answers those: `/health`, `/login` or `/favicon.ico`
   * under the mount have that shape too, and are the host's. Serving alone,
   * the router answers any other method there with 405.
   */
  #match(method: string | undefined, target: string, hosted: boolean): { route: RouteMatch; query: string } | 'openapi' | undefined {
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
   * CORS rules as the routes it describes (a docs page on another origin
   * reads it), and a 405 naming what the path takes for any other method.
   */
  #serveDocument(req: IncomingMessage, res: ServerResponse, routedPath: string | undefined): void {
    const methods = this.#agent === undefined ? 'GET, HEAD, POST' : 'GET, HEAD';
    if (this.options.cors !== undefined && applyCors(this.options.cors, req, res, methods.replace(', HEAD', ''))) return;
    if (req.method !== 'GET' && req.method !== 'HEAD') throw httpErrors.methodNotAllowed(methods);
    const document = this.openapi();
    // A docs page (Swagger UI) sends its requests to the paths under the document's server: without the
    // host's mount path they would miss the router.
    const mount = mountPathOf(req, routedPath);
    if (mount !== '') document.servers = [{ url: mount }];
    sendJson(res, 200, document);
  }

  /** The router's routes as an OpenAPI 3.1 document, with its `tags` and `responses` options; a fresh object each call. */
  openapi(): OpenAPIDocument {
    const { tags, responses, maxIdLength, openapi } = this.options;
    return buildOpenAPI({ prefix: this.prefix, agentId: this.#agent?.id, maxIdLength, servesDocument: openapi, tags, responses });
  }

  /**
   * Runs the request's action. Not an async function: what a turn holds open
   * (a stream above all) is its Running record and one callback, not a
   * suspended frame. Throws synchronously for a request refused before any
   * turn starts; `#follow` answers both ways.
   */
  #dispatch(exchange: Exchange, action: RouteAction, body: Record<string, unknown>): Started {
    const { req, res, agentId, query } = exchange;
    // Gone while an async authorize hook ran (the generic envelope's, or any with a body a framework
    // parsed): no 'close' will come again to cut the turn, so it must not start, nor make an agent.
    if (res.destroyed || streamReset(res)) throw new AgentRouterError(499, 'client_closed', 'Client closed the connection before the turn began');
    if (this.#shut !== undefined) throw this.#shut.reason;
    let stream: boolean | 'events' = false;
    let message = '';
    if (action === 'chat') {
      message = requireMessage(body);
      stream = parseStreamFlag(queryParam(query, 'stream'), req.headers.accept);
      // Before the agent is looked up: a refused stream must not make (or evict for) an instance.
      if (stream !== false && this.#openStreams >= this.#maxStreams) throw this.#tooManyStreams();
    }
    const target = this.#resolve(agentId, req);
    // Reading committed state needs no abort plumbing: no turn runs for it.
    if (action === 'state' && 'agent' in target) return this.#answerState(exchange, target);
    const running = this.#begin(exchange, target);
    const cancel = running.cancel;
    try {
      if (stream !== false) return this.#stream(running, target, message, stream === 'events', exchange.answered);
      // Answered where the reply comes in, not by #serve's chain: that would take two more hops.
      running.answered = exchange.answered;
      // A local agent's chat turn, unless a subclass has its own chat() to go through, reports to a sink.
      if (action === 'chat' && 'agent' in target && target.agent.chat === Agent.prototype.chat) {
        target.agent[chatInto](message, cancelledBy(cancel), new ChatReply(running, this.#onReply, this.#onEnd));
        return ANSWERS_ITSELF;
      }
      this.#call(target, agentId, action, body, message, cancel).then(
        (reply) => this.#reply(running, reply),
        (error: unknown) => this.#onEnd(running, { error }),
      );
      return ANSWERS_ITSELF;
    } catch (error) {
      this.#settle(running);
      throw cancel.aborted ? cancel.reason : error;
    }
  }

  /** Sends a JSON action's reply, and ends the request. */
  #reply(running: Running, reply: JsonObject): void {
    try {
      sendJson(running.res, 200, reply);
      cutIfLeftUnread(running.res, this.#unreadMs);
    } catch (error) {
      // A reply that cannot be sent (a remote's result JSON cannot hold); after the turn was cut, the cut answers.
      return this.#onEnd(running, { error });
    }
    this.#onEnd(running, undefined);
  }

  /** Starts a request's turn: its cancel, cut by the client leaving, the hint's signal and the turn timeout. */
  #begin({ res, agentId, signal: outer }: Exchange, target: Resolved): Running {
    const cancel = new TurnCancel();
    const running: Running = {
      res, agentId, cancel,
      pooled: isPooled(target),
      onClose: cutOnClose(res, cancel),
      outer, onOuterAbort: undefined,
      // A remote target keeps its own turn timeout; the transport cuts only a silent remote.
      timed: this.#turns.timing && 'agent' in target,
      streaming: false,
      answered: undefined,
      reading: false,
      began: 0, listed: false, older: undefined, newer: undefined,
    };
    res.on('close', running.onClose);
    if (outer !== undefined) {
      const onOuterAbort = (): void => cancel.abort(outer.reason);
      running.onOuterAbort = onOuterAbort;
      if (outer.aborted) onOuterAbort();
      else whenAborted(outer, onOuterAbort);
    }
    this.#turns.add(running);
    return running;
  }

  /** Undoes #begin once the request is answered. */
  #settle(running: Running): void {
    const { res, agentId, cancel, outer, onOuterAbort } = running;
    if (running.streaming) this.#openStreams--;
    this.#turns.delete(running);
    res.off('close', running.onClose);
    if (onOuterAbort !== undefined && outer !== undefined) stopWatching(outer, onOuterAbort);
    if (running.pooled) this.pool?.release(agentId);
  }

  /** A chat reply as SSE: started now, and `answered` is called when it ended (no promise is kept meanwhile). */
  #stream(running: Running, target: Resolved, message: string, typed: boolean, answered: (() => void) | undefined): typeof ANSWERS_ITSELF {
    const { agentId, cancel } = running;
    const source = this.#source(target, agentId, message, cancel);
    // A client that reads nothing for turnTimeout is taken as gone: its stream, local or remote, is cut.
    const options = { typed, cancel, pingInterval: this.options.pingInterval, stallTimeout: this.#turnTimeout, logger: this.#logger };
    this.#openStreams++;
    running.streaming = true;
    running.answered = answered;
    streamReply(running.res, agentId, source, options, this.#onEnd, running);
    return ANSWERS_ITSELF;
  }

  #tooManyStreams(): AgentRouterError {
    return new AgentRouterError(503, 'too_many_streams', `All ${this.#maxStreams} streams are in use; retry shortly`, {
      expose: true,
      headers: { 'Retry-After': '1' },
    });
  }

  /**
   * The committed state; at once (no promise taken, nothing to time) when the agent can tell without
   * asking storage. Else the read is bounded as a turn is: a storage that cannot be reached and does
   * not say so (a client queueing commands until it reconnects, a pool waiting for a connection)
   * held the request for good. It is answered 504 `turn_timeout` after `turnTimeout` (or 499 when the
   * client leaves, or abortAll's reason); the read goes on, shared with whoever asks next.
   */
  #answerState(exchange: Exchange, target: Resolved & { agent: Agent<any> }): Started {
    const { res, agentId } = exchange;
    const agent = target.agent;
    // Unless a subclass has its own snapshot() to go through.
    const now = agent.snapshot === Agent.prototype.snapshot ? agent[committedState]() : undefined;
    if (now !== undefined) {
      try {
        sendJson(res, 200, { agent_id: agentId, state: now });
        cutIfLeftUnread(res, this.#unreadMs);
      } finally {
        this.#release(target, agentId);
      }
      return ANSWERED;
    }
    const running = this.#begin(exchange, target);
    running.reading = true;
    running.answered = exchange.answered;
    const cancel = running.cancel;
    let snapshot: Promise<unknown>;
    try {
      // Resolved, not assumed a promise: a subclass's snapshot() may answer synchronously (or throw).
      snapshot = Promise.resolve(agent.snapshot());
    } catch (error) {
      this.#settle(running);
      running.answered = undefined;
      throw error;
    }
    // The first of the read and the cut answers; what comes after finds the cancel aborted, or the hook gone.
    const cut = (reason: unknown): void => this.#onEnd(running, { error: reason });
    if (cancel.aborted) cut(cancel.reason);
    else cancel.onAbort(cut);
    snapshot.then(
      (state) => {
        if (cancel.aborted) return;
        cancel.offAbort(cut);
        this.#reply(running, { agent_id: agentId, state: state as JsonObject });
      },
      (error: unknown) => {
        if (cancel.aborted) return;
        cancel.offAbort(cut);
        this.#onEnd(running, { error });
      },
    );
    return ANSWERS_ITSELF;
  }

  /**
   * A JSON action on a local agent or a remote (a local agent's own chat turn
   * reports to a ChatReply instead, see #dispatch). Not an async function: a
   * refusal before the call (no method) throws synchronously.
   * Resolved, not assumed promises: a transport of the user's may answer
   * synchronously.
   */
  #call(target: Resolved, agentId: string, action: RouteAction, body: Record<string, unknown>, message: string, cancel: TurnCancel): Promise<JsonObject> {
    const remote = 'transport' in target ? target.transport : undefined;
    const options = 'transport' in target ? { signal: cancel.signal, requestId: target.requestId, requestHeaders: target.requestHeaders } : undefined;
    const agent = 'agent' in target ? target.agent : undefined;
    switch (action) {
      case 'chat': {
        // A local agent's own turn reports to a ChatReply instead (see #dispatch); this is a subclass's own chat()
        // or a remote. An HTTPTransport passes on the remote's mark too (unless a subclass has its own chat());
        // a transport of the user's gives the text alone.
        if (remote instanceof HTTPTransport && remote.chat === HTTPTransport.prototype.chat) {
          return remote[chatReply](agentId, message, options).then(({ response, truncated }) =>
            truncated ? { agent_id: agentId, response, truncated } : { agent_id: agentId, response },
          );
        }
        const replying = remote !== undefined ? remote.chat(agentId, message, options) : (agent as Agent<any>).chat(message, cancelledBy(cancel));
        return Promise.resolve(replying).then((response) => ({ agent_id: agentId, response }));
      }
      case 'invoke': {
        const payload = invokePayload(body);
        const method = payload['method'];
        if (typeof method !== 'string' || method === '') {
          throw httpErrors.badRequest('missing_method', 'Invoke needs a "method" string, e.g. {"method": "increment", "params": {"by": 2}}');
        }
        const params = payload['params'];
        const result = remote !== undefined ? remote.invoke(agentId, method, params, options) : (agent as Agent<any>).invoke(method, params, cancelledBy(cancel));
        return Promise.resolve(result).then((value) => ({ agent_id: agentId, result: (value ?? null) as JsonObject }));
      }
      default: {
        // A local agent's state is answered by #answerState, before any turn plumbing.
        return Promise.resolve((remote as AgentTransport).state(agentId, options)).then((state) => ({ agent_id: agentId, state }));
      }
    }
  }

  /**
   * Aborts every request running now with `reason` (an AgentRouterError
   * picks the status): JSON requests answer it, streams end with
   * `event: error`, and their turns change nothing. AgentServer's close()
   * calls it at its deadline.
   */
  abortAll(reason: unknown): void {
    for (const running of this.#turns.list()) running.cancel.abort(reason);
  }

  /** See `shutTurns`. @internal */
  [shutTurns](reason: unknown): void {
    this.#shut = { reason };
    this.abortAll(reason);
  }

  /** Open SSE streams now. */
  get openStreams(): number {
    return this.#openStreams;
  }

  #source(target: Resolved, agentId: string, message: string, cancel: TurnCancel): ReplySource {
    if ('agent' in target) {
      const agent = target.agent;
      // Pushed straight to the writer, unless a subclass has its own stream() to go through.
      if (agent.stream === Agent.prototype.stream) return { agent, message };
      return { chunks: agent.stream(message, cancelledBy(cancel)) };
    }
    return { chunks: target.transport.stream(agentId, message, { signal: cancel.signal, requestId: target.requestId, requestHeaders: target.requestHeaders }) };
  }

  #resolve(agentId: string, req: IncomingMessage): Resolved {
    if (this.#agent !== undefined) return { agent: this.#agent, pooled: false };
    const target = (this.#registry as AgentRegistry).resolve(agentId);
    if (isTransport(target)) return { transport: target, requestId: requestIdOf(req), requestHeaders: req.headers };
    return { agent: (this.pool as AgentPool).acquire(agentId, (id) => new target(id)), pooled: true };
  }

  /** Ends the request's use of a pooled instance. */
  #release(target: Resolved, agentId: string): void {
    if (isPooled(target)) this.pool?.release(agentId);
  }

  #fail(res: ServerResponse, error: unknown): void {
    if (worthLogging(error)) this.#logger.error(`AgentRouter: request failed with ${statusOf(error)}`, error);
    // sendError writes nothing to a client that is gone (what our own 499 client_closed says); an
    // action's own 499, whatever its code, reaches a client still there like any status.
    sendError(res, error);
  }
}
