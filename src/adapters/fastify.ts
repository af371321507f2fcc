/// <reference types="node" preserve="true" />
// Node's types for these declarations, as in index.ts.
import type { Readable } from 'node:stream';
import { httpErrors } from '../errors.ts';
import { streamReset } from '../http/body.ts';
import { OpenResponses } from '../http/open-responses.ts';
import { serveRequest, type AgentRouter } from '../router/router.ts';
import { checkOptions } from '../options.ts';
import { bodyFromParser, bodyLimitOf, checkRouter } from './common.ts';
import type { FastifyMethod, FastifyPlugin, FastifyReplyLike, FastifyRequestLike } from './shapes.ts';
export type { FastifyErrorLike, FastifyInstanceLike, FastifyMethod, FastifyPlugin, FastifyReplyLike, FastifyRequestLike } from './shapes.ts';

const METHODS: FastifyMethod[] = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'];

/** After the shutdown deadline, how long aborted streams have to be read to their end before their sockets are cut (AgentServer's grace too). */
const ABORT_GRACE_MS = 1000;

/**
 * Mounts an AgentRouter in a Fastify (4 or 5) app as a plugin:
 * `app.register(toFastify(router), { prefix: '/api' })`. The plugin registers
 * catch-all routes under its prefix (host routes, being more specific, still
 * win), hijacks the reply and lets the router read the body and write to the
 * raw response, streams included: every body is refused or accepted exactly
 * as on node:http, unless a host preParsing hook hands on a stream of its
 * own (see below). A path that is not the router's gets Fastify's not-found
 * handler.
 *
 * Everything the plugin sets (routes, its content-type parsers, an error
 * handler) stays inside its own encapsulation context: the host app's parsers
 * and error handler are untouched elsewhere.
 */
export function toFastify(router: AgentRouter, options: FastifyAdapterOptions = {}): FastifyPlugin {
  checkRouter(router, 'toFastify');
  if (typeof router[serveRequest] !== 'function') {
    throw new TypeError('toFastify: this AgentRouter comes from another copy of agent-router (a dependency\'s own, or npm link); import toFastify from the copy that made it');
  }
  const bodyLimit = bodyLimitOf(router);
  checkOptions(options, { shutdownTimeout: 'seconds' }, 'toFastify');
  const shutdownMs = (options.shutdownTimeout ?? 10) * 1000;
  return async (fastify) => {
    // Counted in segments, not characters: the prefix is a pattern (`/t/:tenant`), and the URL holds what it matched.
    const prefixSegments = fastify.prefix.split('/').filter((segment) => segment !== '').length;
    // With ignoreDuplicateSlashes Fastify routes `//api//a/state` here; the raw URL must be read the same way.
    const config = fastify.initialConfig;
    const collapse = (config?.routerOptions?.ignoreDuplicateSlashes ?? config?.ignoreDuplicateSlashes) === true;
    /**
     * The router's responses not yet closed, for fastify.close(): those in progress, and those answered
     * whose client has not read their last bytes yet (a stream's end, to a client that stopped reading).
     */
    const open = new OpenResponses();

    // Not async: the promise handed back settles when the router calls back that the request is answered.
    const handler = (request: FastifyRequestLike, reply: FastifyReplyLike): Promise<void> | undefined => {
      const target = afterSegments(collapse ? collapseSlashes(request.url) : request.url, prefixSegments);
      const hint: { path: string; body?: unknown } = { path: target };
      // Once the router has matched the path, before it writes or reads the body: the reply becomes the router's,
      // and so do the bytes a host preParsing hook's stream gave, if any (checked as a host parser's raw text).
      const claim = (): void => {
        const bytes = request.body;
        if (bytes !== undefined) {
          // Never undefined for a JSON type: the router would read the request itself, which the hook's stream holds.
          hint.body = bodyFromParser(request.raw, bytes, bodyLimit, true);
          // Read only up to the limit: the rest of the upload stays on the connection, unread, and a next
          // request there would wait for good. Closed once answered, whatever the answer.
          if (Buffer.isBuffer(bytes) && bytes.length > bodyLimit) reply.raw.shouldKeepAlive = false;
        }
        reply.hijack();
        // Headers a hook set through Fastify (CORS, request ids) would be lost with the hijack.
        const headers = reply.getHeaders();
        for (const name in headers) if (headers[name] !== undefined) reply.raw.setHeader(name, headers[name]);
      };
      let answered!: () => void;
      const answering = new Promise<void>((resolve) => {
        answered = resolve;
      });
      if (router[serveRequest](request.raw, reply.raw, answered, hint, { claim })) {
        // 'close' comes a tick later, even for a request answered at once; one whose client left during a host hook had it
        // already (over HTTP/2 `destroyed` is missing: its stream tells), and would stay in `open` for good.
        if (!reply.raw.destroyed && !streamReset(reply.raw)) {
          const raw = reply.raw;
          const entry = open.add(raw);
          raw.on('close', () => open.delete(entry));
        }
        return answering;
      }
      reply.callNotFound();
      return undefined;
    };

    // fastify.close() waits for open connections, so running turns get shutdownTimeout, then are aborted as under AgentServer,
    // and a response still open ABORT_GRACE_MS after (a client that stopped reading) is cut. Not awaited: pluginTimeout.
    let deadline: NodeJS.Timeout | undefined;
    let grace: NodeJS.Timeout | undefined;
    fastify.addHook('preClose', (done: () => void) => {
      if (open.size > 0 && deadline === undefined) {
        deadline = setTimeout(() => {
          router.abortAll(httpErrors.unavailable());
          grace = setTimeout(() => {
            // Written to its end but not taken by the client. One not ended yet (a request still sending its
            // body at the deadline, whose turn began after it) is answered as usual, and close() waits for it.
            for (const res of open.list()) if (res.writableEnded) res.destroy();
          }, ABORT_GRACE_MS);
          grace.unref();
        }, shutdownMs);
        deadline.unref();
        // Read, not declared in FastifyInstanceLike: a `server` there would make TypeScript infer the app's
        // server type from it, and type-check the plugin against HTTP/2 requests too.
        const server = (fastify as { server?: { closeIdleConnections?: () => void } }).server;
        const closeIdle = (): void => server?.closeIdleConnections?.();
        for (const res of open.list()) {
          if (!res.headersSent) res.shouldKeepAlive = false;
          else res.once('finish', closeIdle);
        }
      }
      done();
    });
    fastify.addHook('onClose', (_instance: unknown, done: () => void) => {
      clearTimeout(deadline);
      clearTimeout(grace);
      done();
    });

    // Every body is the router's to read, as on node:http; in this plugin's context only. Bytes a host preParsing hook hands
    // on (decompressed), or a request a hook reads alongside (fastify-raw-body), are read here, as a host parser would.
    fastify.removeAllContentTypeParsers();
    fastify.addContentTypeParser('*', (request, payload, done) => {
      const raw = request.raw;
      const alongside = raw.readableFlowing === true && !raw.readableDidRead && raw.headers['content-encoding'] === undefined;
      if (payload === raw && !alongside) return done(null);
      readUpTo(payload, bodyLimit, done);
    });
    // Fastify 5 refuses a Content-Type it cannot parse before choosing a parser: the router answers it
    // as on node:http (415). Any other error is the host's error handler's to answer.
    fastify.setErrorHandler((error, request, reply) => {
      if (error.code !== 'FST_ERR_CTP_INVALID_MEDIA_TYPE') throw error;
      return handler(request, reply);
    });

    // OPTIONS only when the router answers preflights itself; otherwise a host CORS plugin does.
    // HEAD only when Fastify does not make it from GET (exposeHeadRoutes: false): both would be a duplicate route.
    const methods: FastifyMethod[] = [...METHODS];
    if (router.options.cors !== undefined) methods.push('OPTIONS');
    if (config?.exposeHeadRoutes === false) methods.push('HEAD');
    fastify.route({ method: methods, url: '/*', handler });
    // The bare prefix is a route only of a single-agent router without a prefix of its own (POST /).
    if (router.pool === undefined && router.prefix === '') fastify.route({ method: ['POST'], url: '/', handler });
  };
}

export interface FastifyAdapterOptions {
  /**
   * Seconds `fastify.close()` lets the router's running turns and streams
   * finish before it aborts them (a stream then ends with `event: error`,
   * `shutting_down`). @defaultValue 10, as AgentServer's
   */
  shutdownTimeout?: number | undefined;
}

/** The request target after its first `count` path segments (the plugin's prefix), from its slash on: `/` when nothing is left. */
function afterSegments(url: string, count: number): string {
  const query = url.indexOf('?');
  const pathEnd = query === -1 ? url.length : query;
  let at = 0;
  for (let i = 0; i < count && at < pathEnd; i++) {
    const next = url.indexOf('/', at + 1);
    at = next === -1 || next > pathEnd ? pathEnd : next;
  }
  return at === pathEnd ? `/${url.slice(pathEnd)}` : url.slice(at);
}

/** `//a//b?x=//` -> `/a/b?x=//`: runs of slashes in the path made one, as Fastify's router does with ignoreDuplicateSlashes. */
function collapseSlashes(url: string): string {
  const query = url.indexOf('?');
  const path = query === -1 ? url : url.slice(0, query);
  return path.replace(/\/{2,}/g, '/') + (query === -1 ? '' : url.slice(query));
}

/**
 * The bytes of a stream a preParsing hook handed on, up to one chunk past
 * `limit` (the router then answers 413 without more being buffered).
 */
function readUpTo(stream: Readable, limit: number, done: (error: Error | null, body?: Buffer) => void): void {
  const chunks: Buffer[] = [];
  let size = 0;
  const finish = (error: Error | null): void => {
    stream.off('data', onData);
    stream.off('end', onEnd);
    stream.off('error', finish);
    if (error !== null) return done(error);
    done(null, Buffer.concat(chunks));
  };
  const onData = (chunk: Buffer | string): void => {
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    chunks.push(bytes);
    size += bytes.length;
    if (size <= limit) return;
    stream.pause();
    finish(null);
  };
  const onEnd = (): void => finish(null);
  stream.on('data', onData);
  stream.on('end', onEnd);
  stream.on('error', finish);
  // A stream handed on paused (@fastify/compress pauses its inflating one) does not start flowing
  // when a 'data' listener is added: without this nothing is read, and the request waits for good.
  stream.resume();
}
