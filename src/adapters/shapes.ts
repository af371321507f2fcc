/**
 * The few parts of Express, Koa and Fastify that the adapters touch, written
 * as structural types so the library imports none of them (zero
 * runtime dependencies, and no framework's types either). Each shape is a
 * subset of the real object in both current majors (Express 4 and 5, Koa 2
 * and 3, Fastify 4 and 5), so the real objects are accepted as they are.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

// Express

/** Express's `req`: a node request whose `url` is already relative to the mount path. */
export interface ExpressRequest extends IncomingMessage {
  /** What a body parser such as `express.json()` left; `{}` (Express 4) or undefined (Express 5) when it did not parse. */
  body?: unknown;
}

/** Express's `next`: no argument passes to the next route, an error goes to the error handlers. */
export type ExpressNext = (error?: unknown) => void;

/** An Express middleware, as `app.use(path, middleware)` takes it. */
export type ExpressMiddleware = (req: ExpressRequest, res: ServerResponse, next: ExpressNext) => void;

// Koa

/** The part of Koa's `ctx` the adapter reads or sets. */
export interface KoaContext {
  req: IncomingMessage;
  res: ServerResponse;
  /** The request target (path and query); a mount such as koa-mount makes it relative. */
  url: string;
  /**
   * Read for `body`, what a body parser (e.g. `@koa/bodyparser`) left, if one
   * ran. Typed `object`: Koa's own Request type declares no `body` until a
   * parser's types add it, and a type whose only property is optional
   * would then refuse it (TypeScript's weak type check).
   */
  request: object;
  /** Koa's escape hatch: false means "the response is written by hand, do not touch it". */
  respond?: boolean | undefined;
}

/** Koa's `next`. */
export type KoaNext = () => Promise<unknown>;

/** A Koa middleware, as `app.use(middleware)` takes it. */
export type KoaMiddleware = (ctx: KoaContext, next: KoaNext) => Promise<void>;

// Fastify

/** Fastify's `request`. */
export interface FastifyRequestLike {
  /** The node request. */
  raw: IncomingMessage;
  /** The full request target, prefix included. */
  url: string;
  /** What the plugin's content-type parser left: the bytes a host `preParsing` hook's stream gave, if one replaced the request. */
  body?: unknown;
}

/** Fastify's `reply`. */
export interface FastifyReplyLike {
  /** The node response, written to after `hijack()`. */
  raw: ServerResponse;
  /** Tells Fastify the handler writes the response itself. */
  hijack(): unknown;
  /** Answers with the instance's not-found handler. */
  callNotFound(): unknown;
  /** Headers set so far through Fastify (e.g. by a CORS plugin's hook). */
  getHeaders(): Record<string, number | string | string[] | undefined>;
}

/** An error Fastify raises before a handler runs (here: a Content-Type it cannot parse). */
export interface FastifyErrorLike extends Error {
  code?: string | undefined;
}

/** The HTTP methods the plugin registers its catch-all routes for. */
export type FastifyMethod = 'GET' | 'HEAD' | 'POST' | 'PUT' | 'PATCH' | 'DELETE' | 'OPTIONS';

/** The part of a Fastify instance (the plugin's own encapsulation context) the plugin uses. */
export interface FastifyInstanceLike {
  /** The prefix the plugin was registered with, parents' prefixes included. */
  readonly prefix: string;
  /** The app's options; the plugin reads how the router treats duplicate slashes (Fastify 4: top level, 5: routerOptions). */
  readonly initialConfig?: { ignoreDuplicateSlashes?: boolean; exposeHeadRoutes?: boolean; routerOptions?: { ignoreDuplicateSlashes?: boolean } } | undefined;
  /** The plugin's shutdown hooks (see toFastify's `shutdownTimeout`). */
  addHook(name: 'preClose', hook: (done: () => void) => void): unknown;
  addHook(name: 'onClose', hook: (instance: never, done: () => void) => void): unknown;
  route(options: {
    method: FastifyMethod[];
    url: string;
    handler: (request: FastifyRequestLike, reply: FastifyReplyLike) => Promise<void> | undefined;
  }): unknown;
  /** Drops the parsers this context inherited (this context only). */
  removeAllContentTypeParsers(): unknown;
  addContentTypeParser(
    contentType: string,
    parser: (request: FastifyRequestLike, payload: IncomingMessage, done: (error: Error | null, body?: unknown) => void) => void,
  ): unknown;
  setErrorHandler(handler: (error: FastifyErrorLike, request: FastifyRequestLike, reply: FastifyReplyLike) => unknown): unknown;
}

/** A Fastify plugin, for `app.register(plugin, { prefix })`. */
export type FastifyPlugin = (instance: FastifyInstanceLike, options: Record<string, unknown>) => Promise<void>;
