import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent } from '../agent/agent.ts';
import { describeValue, errorBody, httpErrors, statusOf } from '../errors.ts';
import { authorizeRequest } from '../http/authorize.ts';
import { continueListener } from '../http/continue.ts';
import { applyCors } from '../http/cors.ts';
import { decodeAgentId, splitTarget } from '../http/path.ts';
import { lingerOnClose } from '../http/linger.ts';
import { refuseRepeatedHost, targetHost } from '../http/precheck.ts';
import { closeWithConnection, sendError, sendJson } from '../http/respond.ts';
import { AgentRouter, serveRequest, shutTurns, type AgentRequestListener } from '../router/router.ts';
import { loggerOf, type Logger } from '../lib/logger.ts';
import { AgentRegistry, type AgentClass } from '../registry/registry.ts';
import { hostCheck, type AllowedHosts, type HostCheck } from './allowed-hosts.ts';
import { resolveServerConfig, type AgentServerConfig, type ServerSettings } from './config.ts';
import { answerClientError, answerConnect, answerExpectation } from './client-error.ts';
import { InFlight } from './inflight.ts';
import { listenError, openConnections, stopAccepting } from './listening.ts';
import { serveOwnPath } from './metrics-route.ts';
import { servePlayground } from './playground.ts';
import { AgentPool } from '../registry/pool.ts';

/** After the shutdown deadline, aborted turns get this long to write their `event: error`, and sockets this long to close, before they are cut. */
const ABORT_GRACE_MS = 1000;
/** How long after close() began idle keep-alive connections stay open: a request already sent on one is answered 503, not reset. */
const IDLE_GRACE_MS = 250;

/**
 * The standalone server (docs/reference/http-api.md, "Routes"): the registry router at
 * `/agent`, `GET /agents` when `enableListAgents`, `GET /healthz`, and 404
 * JSON for everything else. It owns the pool of live agents (idle eviction,
 * `maxAgents`) and shuts down gracefully.
 *
 * @example
 * const server = new AgentServer(registry, { idleTimeout: 300, maxAgents: 1000 });
 * await server.serve(8080);            // POST http://127.0.0.1:8080/agent/{agent_id}/chat
 * process.on('SIGTERM', () => server.close());
 */
/** An AgentServer once `serve()` resolved: its port, url and http.Server are known. */
export type ServingAgentServer = AgentServer & { readonly port: number; readonly url: string; readonly httpServer: Server };

export class AgentServer {
  /** The registry served (for a single Agent, one made around it). */
  readonly registry: AgentRegistry;
  /** The router mounted at `/agent`. */
  readonly router: AgentRouter;
  /** The live agent instances. */
  readonly pool: AgentPool;
  /** The settings in effect, defaults filled in. */
  readonly config: Readonly<ServerSettings>;
  readonly #logger: Logger;
  readonly #inFlight = new InFlight();
  /** Where the router's routes start (`/agent/`): those skip the server's own paths. */
  readonly #routerPath: string;
  #http: Server | undefined;
  #port: number | undefined;
  #host = '127.0.0.1';
  #closing: Promise<void> | undefined;
  /** close() began and its drainDelay runs: serving as usual, but /healthz says 503. */
  #lameDuck = false;
  /** Which Host headers are answered (allowedHosts); undefined: any. Set again by `serve`, which knows the address. */
  #hostAllowed: HostCheck | undefined;
  readonly #allowedHosts: AllowedHosts | undefined;

  /**
   * @param target an AgentRegistry, or one Agent (served at `/agent/{its id}/...`)
   * @param config see {@link AgentServerConfig}; durations in seconds
   */
  constructor(target: AgentRegistry | Agent<any>, config: AgentServerConfig = {}) {
    this.config = Object.freeze(resolveServerConfig(config));
    this.#allowedHosts = config.allowedHosts;
    this.#hostAllowed = hostCheck(config.allowedHosts, undefined);
    this.registry = registryFor(target, config.maxIdLength ?? 256);
    this.#logger = loggerOf(config.logger);
    this.pool = new AgentPool({
      idleTimeout: this.config.idleTimeout,
      maxAgents: this.config.maxAgents,
      onCreate: config.onCreate,
      onEvict: config.onEvict,
      logger: this.#logger,
      now: config.now,
    });
    const { enableListAgents, playground, allowedHosts, shutdownTimeout, drainDelay, keepAliveTimeout, headersTimeout, requestTimeout, ...routerOptions } = config;
    this.router = new AgentRouter(this.registry, { ...routerOptions, prefix: '/agent', pool: this.pool });
    this.#routerPath = `${this.router.prefix}/`;
  }

  /** The bound port once `serve` resolved (the real one when asked for port 0). */
  get port(): number | undefined {
    return this.#port;
  }

  /** `http://host:port` once serving. */
  get url(): string | undefined {
    if (this.#port === undefined) return undefined;
    const host = this.#host.includes(':') ? `[${this.#host}]` : this.#host;
    return `http://${host}:${this.#port}`;
  }

  /** The underlying `http.Server` once `serve` was called. */
  get httpServer(): Server | undefined {
    return this.#http;
  }

  /** True once `close()` was called. */
  get closing(): boolean {
    return this.#closing !== undefined;
  }

  /**
   * The server's `(req, res)` listener, to mount it on an `http.Server` of
   * your own instead of calling `serve`. `close()` then drains its requests
   * but cannot stop your server from accepting. It does not know where your
   * server listens, so it checks `Host` only against an `allowedHosts` you
   * give (see there). It serves node:http2's compatibility API the same way
   * (`http2.createSecureServer({ allowHTTP1: true }, server.listener)`), so it
   * is typed as the router's listener is, which fits both.
   */
  readonly listener: AgentRequestListener = ((req: IncomingMessage, res: ServerResponse): void => {
    // Before anything waits for its 'close' (InFlight, the router), in case it is queued behind another.
    closeWithConnection(req, res);
    lingerOnClose(req, res);
    if (this.#closing !== undefined && !this.#lameDuck) {
      // With cors, a page reads this 503 (and its preflight is answered) rather than a network error: a listener of your
      // own, or an HTTP/2 connection a page's requests share, keeps answering after close() began.
      if (!this.#corsWhileClosing(req, res)) refuse(res);
      // Tracked too: it may be queued behind a pipelined stream, and must not be cut before it is sent.
      this.#inFlight.track(res)();
      return;
    }
    const answered = this.#inFlight.track(res);
    // HTTP/1.1 requires Host (RFC 9112, 3.2); Node's check is off so that this answer is JSON.
    if (req.headers.host === undefined && req.httpVersion === '1.1') {
      sendJson(res, 400, { error: 'HTTP/1.1 requests must carry a Host header', code: 'missing_host' });
      answered();
      return;
    }
    if (refuseRepeatedHost(req, res)) {
      answered();
      return;
    }
    // An absolute-form target's host stands for the Host header; HTTP/2 names it in `:authority`.
    const host = targetHost(req.url) ?? req.headers.host ?? (req.headers[':authority'] as string | undefined);
    if (this.#hostAllowed !== undefined && !this.#hostAllowed(host)) {
      sendJson(res, 403, { error: hostRefusal(host as string), code: 'host_not_allowed' });
      answered();
      return;
    }
    // The router's routes first, without a promise on top: the router answers its own failures.
    const url = req.url;
    if (url !== undefined && url.startsWith(this.#routerPath) && this.router[serveRequest](req, res, answered)) return;
    this.#route(req, res).then(answered, (error: unknown) => {
      try {
        if (statusOf(error) >= 500) this.#logger.error('AgentServer: request failed', error);
        sendError(res, error);
      } finally {
        answered();
      }
    });
  }) as AgentRequestListener;

  /**
   * Starts listening; resolves once it does, to this server, whose `port` and `url` are then set
   * (`const { port } = await server.serve(0)` types `port` as a number).
   * Rejects with a clear error (its `code`, e.g. `EADDRINUSE`, kept) when it cannot.
   * @param port @defaultValue 8080; 0 picks a free port
   * @param host @defaultValue '127.0.0.1' (only this machine); '0.0.0.0' for every interface
   */
  async serve(port = 8080, host = '127.0.0.1'): Promise<ServingAgentServer> {
    if (this.#closing !== undefined) throw new Error('AgentServer.serve: this server was closed; create a new AgentServer');
    if (this.#http !== undefined) throw new Error(`AgentServer.serve: already serving${this.url === undefined ? '' : ` on ${this.url}`}`);
    if (!Number.isInteger(port) || port < 0 || port > 65535) {
      // serve(process.env.PORT) passes a string: quoted, so "got 8080" does not read as a valid port refused.
      const hint = typeof port === 'string' ? '; convert a string first, e.g. serve(Number(process.env.PORT ?? 8080))' : '';
      throw new TypeError(`AgentServer.serve: port must be an integer from 0 to 65535, got ${describeValue(port)}${hint}`);
    }
    if (typeof host !== 'string' || host === '') throw new TypeError('AgentServer.serve: host must be a string such as "127.0.0.1"');
    // `[::1]` as a URL writes it (and as `url` prints it): listen() takes the address without the brackets.
    if (host.length > 2 && host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1);
    const { keepAliveTimeout, headersTimeout, requestTimeout } = this.config;
    const server = createServer({
      keepAliveTimeout: keepAliveTimeout * 1000,
      headersTimeout: headersTimeout * 1000,
      requestTimeout: requestTimeout * 1000,
      // How often Node checks those deadlines; its 30 s default would let a short timeout run long.
      connectionsCheckingInterval: Math.min(30_000, Math.max(50, headersTimeout * 250)),
      // Node answers a missing Host with a bare 400; the listener answers it as JSON instead.
      requireHostHeader: false,
    }, this.listener);
    server.keepAliveTimeout = keepAliveTimeout * 1000;
    server.on('clientError', answerClientError);
    server.on('checkExpectation', answerExpectation);
    server.on('connect', answerConnect);
    // Node would send 100 Continue before the router saw the request; the router sends it once it reads the body.
    server.on('checkContinue', continueListener(this.listener));
    this.#http = server; // claimed now, so a second serve() while this one starts is refused
    await new Promise<void>((resolve, reject) => {
      const onError = (error: NodeJS.ErrnoException): void => {
        server.off('listening', onListening);
        this.#http = undefined;
        reject(listenError(error, host, port));
      };
      const onListening = (): void => {
        server.off('error', onError);
        resolve();
      };
      server.once('error', onError);
      server.once('listening', onListening);
      server.listen(port, host);
    });
    server.on('error', (error) => this.#logger.error('AgentServer: server error', error));
    const bound = server.address() as AddressInfo;
    // Loopback by the address bound, not the name given (a name resolving to 127.0.1.1, or `127.1`). Set before any
    // request: connections are accepted only after this continuation runs.
    this.#hostAllowed = hostCheck(this.#allowedHosts, bound.address);
    this.#host = host;
    this.#port = bound.port;
    return this as ServingAgentServer;
  }

  /** Drops one live agent on purpose (its state stays in storage); false if it is not live or is busy. */
  evict(agentId: string): boolean {
    return this.pool.evict(agentId);
  }

  /**
   * Shuts down gracefully: stops accepting connections, answers new requests
   * 503 `shutting_down` with `Connection: close`, lets running turns and
   * streams finish for up to `shutdownTimeout` seconds (idle keep-alive
   * connections stay open a quarter second, so a request already sent on one
   * is answered 503 rather than reset), then aborts the rest
   * (a stream ends with `event: error`, an aborted turn changes nothing),
   * closes the remaining sockets and drops every live agent. Calling it
   * again returns the same promise.
   */
  close(): Promise<void> {
    this.#closing ??= this.#drain();
    return this.#closing;
  }

  async #drain(): Promise<void> {
    const startedAt = Date.now();
    const drainDelay = this.config.drainDelay;
    if (drainDelay > 0) {
      // Serving as usual meanwhile, but /healthz, so the load balancer stops sending before anything is refused.
      this.#lameDuck = true;
      await new Promise((resolve) => setTimeout(resolve, drainDelay * 1000));
      this.#lameDuck = false;
    }
    const server = this.#http;
    // A serve() still starting finishes first, so there is a listening server to close.
    if (server !== undefined && !server.listening) await new Promise((resolve) => server.once('listening', resolve).once('error', resolve));
    const closed = server === undefined || !server.listening ? Promise.resolve() : new Promise<void>((resolve) => stopAccepting(server, resolve));
    for (const res of this.#inFlight.responses()) if (!res.headersSent && !overHttp2(res)) res.setHeader('Connection', 'close');
    if (!(await this.#inFlight.idle(this.config.shutdownTimeout * 1000))) {
      // The router aborts the requests it runs; no per-request listener on a shared signal (O(n) to remove).
      this.router[shutTurns](httpErrors.unavailable());
      await this.#inFlight.idle(ABORT_GRACE_MS);
    }
    await this.pool.settle(ABORT_GRACE_MS);
    this.pool.clear();
    if (server !== undefined) {
      await this.#idleGrace(server, startedAt);
      // Every response is flushed by now: idle keep-alive sockets go; a socket still busy after
      // the grace (a turn that ignored its abort signal, a client that stopped reading) is cut.
      server.closeIdleConnections();
      const timer = setTimeout(() => server.closeAllConnections(), ABORT_GRACE_MS);
      await closed;
      clearTimeout(timer);
    }
  }

  /**
   * Keeps idle keep-alive connections open until IDLE_GRACE_MS after close()
   * began, so a request already on its way in is answered (503) rather than
   * reset; then waits for those answers, read up to the last event-loop turn.
   */
  async #idleGrace(server: Server, startedAt: number): Promise<void> {
    const left = startedAt + IDLE_GRACE_MS - Date.now();
    if (left > 0 && (await openConnections(server)) > 0) await new Promise((resolve) => setTimeout(resolve, left));
    await new Promise(setImmediate);
    await this.#inFlight.idle(ABORT_GRACE_MS);
  }

  async #route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { path } = splitTarget(req.url ?? '/');
    if (serveOwnPath(req, res, path, this.router)) return;
    if (path === '/healthz' || path === '/healthz/') {
      // Liveness, not readiness: it stays ok while storage is unavailable (each request then says so, 503
      // storage_unavailable); failing it with the storage all processes share would take every one out at once.
      if (this.#cors(req, res, 'GET') || !allowRead(req, res)) return;
      if (this.#lameDuck) refuse(res);
      else sendJson(res, 200, { status: 'ok' });
      return;
    }
    if (this.config.playground && (path === '/playground' || path === '/playground/')) return servePlayground(req, res);
    if (this.config.enableListAgents && (path === '/agents' || path === '/agents/')) {
      if (this.#cors(req, res, 'GET') || !allowRead(req, res)) return;
      // Agent ids can be user ids: the list is only for callers the authorize hook lets in.
      await authorizeRequest(this.router.options.authorize, req, '*', 'list');
      const agents = this.pool.list().map((agent) => ({ id: agent.id, last_activity: agent.lastActivity, busy: agent.busy }));
      sendJson(res, 200, { agents });
      return;
    }
    if (await this.router.handle(req, res)) return;
    if (this.#cors(req, res, 'GET, POST')) return;
    sendJson(res, 404, { error: `No route for ${req.method} ${path.slice(0, 200)}`, code: 'not_found' });
  }

  /** The router's CORS on the server's own answers (/healthz, /agents, 404), so a page can read them too; true when it answered a preflight. */
  #cors(req: IncomingMessage, res: ServerResponse, method: string): boolean {
    const cors = this.router.options.cors;
    return cors !== undefined && applyCors(cors, req, res, method);
  }

  /** #cors for the 503 of a server shutting down; an origin predicate that throws is logged, and the 503 goes without CORS headers. */
  #corsWhileClosing(req: IncomingMessage, res: ServerResponse): boolean {
    try {
      return this.#cors(req, res, 'GET, POST');
    } catch (error) {
      this.#logger.error('AgentServer: request failed', error);
      return false;
    }
  }
}

/** GET and HEAD only; anything else gets 405 with `Allow`. */
function allowRead(req: IncomingMessage, res: ServerResponse): boolean {
  if (req.method === 'GET' || req.method === 'HEAD') return true;
  sendError(res, httpErrors.methodNotAllowed('GET, HEAD'));
  return false;
}

function refuse(res: ServerResponse): void {
  sendJson(res, 503, errorBody(httpErrors.unavailable()), overHttp2(res) ? undefined : { Connection: 'close' });
}

/**
 * The listener on a node:http2 server of the user's: HTTP/2 forbids a
 * `Connection` header, which node:http2's compatibility API drops with a
 * warning in the process's output.
 */
function overHttp2(res: ServerResponse): boolean {
  return (res.req as IncomingMessage | undefined)?.httpVersionMajor === 2;
}

function registryFor(target: AgentRegistry | Agent<any>, maxIdLength: number): AgentRegistry {
  if (target instanceof AgentRegistry) return target;
  if (target instanceof Agent) {
    const agent = target;
    try {
      // Served at /agent/{agent_id}/...: an id no request can name would start a server that answers only 400s.
      decodeAgentId(encodeURIComponent(agent.id), maxIdLength);
    } catch (error) {
      throw new TypeError(`AgentServer: the agent's id cannot be named in a URL (${(error as Error).message}); give it another id, or serve it with new AgentRouter(agent), whose routes carry no id`);
    }
    const registry = new AgentRegistry();
    // `new` returns the object a constructor returns, so this "class" always hands back the one instance.
    const single = function SingleAgent() {
      return agent;
    } as unknown as AgentClass;
    registry.register(agent.id.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), single);
    return registry;
  }
  throw new TypeError('AgentServer: the first argument must be an AgentRegistry or an Agent, e.g. new AgentServer(registry, { idleTimeout: 300 })');
}

function hostRefusal(host: string): string {
  return `Host ${JSON.stringify(host.slice(0, 100))} is not allowed here; list it in the server's allowedHosts (agent-router serve --allowed-hosts), as a proxy in front that sends this name needs`;
}
