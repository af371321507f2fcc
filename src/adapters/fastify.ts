/// <reference types="node" preserve="true" />
// Node's types for these declarations, as in index.ts.
import { httpErrors, type AgentRouterError } from '../errors.ts';
import { serveRequest, type AgentRouter } from '../http/router.ts';
import { applyCors } from '../http/cors.ts';
import { mediaType } from '../http/path.ts';
import { bodyLimitOf, parsedBody } from './common.ts';
import type { FastifyErrorLike, FastifyMethod, FastifyPlugin, FastifyReplyLike, FastifyRequestLike } from './shapes.ts';
export type { FastifyErrorLike, FastifyInstanceLike, FastifyMethod, FastifyPlugin, FastifyReplyLike, FastifyRequestLike } from './shapes.ts';

const METHODS: FastifyMethod[] = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'];

/**
 * Mounts an AgentRouter in a Fastify (4 or 5) app as a plugin:
 * `app.register(toFastify(router), { prefix: '/api' })`. The plugin registers
 * catch-all routes under its prefix (host routes, being more specific, still
 * win), lets Fastify parse JSON with the router's body limit, then hijacks the
 * reply and lets the router write to the raw response, streams included.
 * Fastify's own refusals on these routes (413 body too large, 400 invalid
 * JSON, 415 media type) are answered in the router's `{"error", "code"}`
 * shape, except an empty JSON body, which the router answers as on
 * node:http; a path that is not the router's gets Fastify's not-found handler.
 *
 * Everything the plugin sets (routes, a catch-all body parser, an error
 * handler) stays inside its own encapsulation context: the host app's parsers
 * and error handler are untouched.
 */
export function toFastify(router: AgentRouter): FastifyPlugin {
  // Fastify takes a whole number only; a router without a limit (Infinity) gets the largest one.
  const bodyLimit = Math.min(bodyLimitOf(router), Number.MAX_SAFE_INTEGER);
  return async (fastify) => {
    const prefixLength = fastify.prefix.length;
    // With ignoreDuplicateSlashes Fastify routes `//api//a/state` here; the raw URL must be read the same way.
    const config = fastify.initialConfig;
    const collapse = (config?.routerOptions?.ignoreDuplicateSlashes ?? config?.ignoreDuplicateSlashes) === true;

    // Not async: the promise handed back settles when the router calls back that the request is answered.
    const handler = (request: FastifyRequestLike, reply: FastifyReplyLike): Promise<void> | undefined => {
      const target = (collapse ? collapseSlashes(request.url) : request.url).slice(prefixLength) || '/';
      const hint: { path: string; body?: unknown } = { path: target };
      // Once the router has matched the path, before it writes or reads the body: the reply becomes
      // the router's, and so does the parsed body (checked here, so a path that falls through keeps it as it was).
      const claim = (): void => {
        hint.body = parsedBody(request.raw, request.body, bodyLimit);
        reply.hijack();
        // Headers a hook set through Fastify (CORS, request ids) would be lost with the hijack.
        const headers = reply.getHeaders();
        for (const name in headers) if (headers[name] !== undefined) reply.raw.setHeader(name, headers[name]);
      };
      let answered!: () => void;
      const answering = new Promise<void>((resolve) => (answered = resolve));
      if (router[serveRequest](request.raw, reply.raw, answered, hint, { claim })) return answering;
      reply.callNotFound();
      return undefined;
    };

    // JSON stays with Fastify's parser; any other type (or none) is handed to
    // the router unread, which reads an undeclared type as JSON and answers a
    // declared non-JSON one with 415, exactly as on node:http.
    fastify.addContentTypeParser('*', (_request, _payload, done) => done(null));
    fastify.setErrorHandler((error, request, reply) => {
      // An empty JSON body is the router's to answer, as on node:http (it reads as `{}`: 400 missing_message on chat).
      if (error.code === 'FST_ERR_CTP_EMPTY_JSON_BODY') {
        request.body = '';
        return handler(request, reply);
      }
      const mapped = fromFastifyError(error, request, bodyLimit);
      if (mapped === undefined) throw error; // not a body refusal: the host's error handler decides
      // Answered through Fastify, not hijacked, so the host's onSend hooks still run. With the router's
      // cors option, the CORS headers too (set on the raw response, which Fastify's own merge keeps),
      // or a browser could not read why its request was refused.
      const cors = router.options.cors;
      if (cors !== undefined) applyCors(cors, request.raw, reply.raw, 'POST');
      const headers = mapped.headers ?? {};
      for (const name in headers) reply.header(name, headers[name] as string);
      reply.code(mapped.status);
      reply.send({ error: mapped.message, code: mapped.code });
    });

    // OPTIONS only when the router answers preflights itself; otherwise a host CORS plugin does.
    const methods: FastifyMethod[] = router.options.cors === undefined ? METHODS : [...METHODS, 'OPTIONS'];
    fastify.route({ method: methods, url: '/*', bodyLimit, handler });
    // The bare prefix is a route only of a single-agent router without a prefix of its own (POST /).
    if (router.pool === undefined && router.prefix === '') fastify.route({ method: ['POST'], url: '/', bodyLimit, handler });
  };
}

/** `//a//b?x=//` -> `/a/b?x=//`: runs of slashes in the path made one, as Fastify's router does with ignoreDuplicateSlashes. */
function collapseSlashes(url: string): string {
  const query = url.indexOf('?');
  const path = query === -1 ? url : url.slice(0, query);
  return path.replace(/\/{2,}/g, '/') + (query === -1 ? '' : url.slice(query));
}

/** Fastify's body errors as the router's own; undefined for anything else. */
function fromFastifyError(error: FastifyErrorLike, request: FastifyRequestLike, bodyLimit: number): AgentRouterError | undefined {
  switch (error.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return httpErrors.payloadTooLarge(bodyLimit);
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return httpErrors.unsupportedMediaType(mediaType(request.raw.headers['content-type'] ?? ''));
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return invalidJson();
    default:
      // Fastify 4 (and 5 for prototype poisoning) passes JSON.parse's SyntaxError with statusCode 400.
      return error instanceof SyntaxError && error.statusCode === 400 ? invalidJson() : undefined;
  }
}

function invalidJson(): AgentRouterError {
  return httpErrors.badRequest('invalid_json', 'Invalid JSON body');
}
