import type { IncomingMessage } from 'node:http';
import type { AgentRouter } from '../router/router.ts';
import { JsonText, otherCharset } from '../http/body.ts';
import { mediaType } from '../lib/media-type.ts';

/**
 * Refuses anything but an AgentRouter (a registry or an Agent is the likely
 * mistake) with the fix, not a TypeError from inside. By shape, not
 * `instanceof`: a router from another copy of the package (a dependency's
 * own, `npm link`) serves Express and Koa through its public methods.
 */
export function checkRouter(router: unknown, where: string): void {
  const shaped = typeof router === 'object' && router !== null && typeof (router as AgentRouter).handle === 'function'
    && typeof (router as AgentRouter).options === 'object';
  if (!shaped) throw new TypeError(`${where}: pass an AgentRouter, e.g. ${where}(new AgentRouter(registry))`);
}

/** The router's body limit in bytes (its `bodyLimit` option, 1 MiB by default). */
export function bodyLimitOf(router: AgentRouter): number {
  return router.options.bodyLimit ?? 1024 * 1024;
}

/**
 * The body a framework's parser left on the request, when the router may use
 * it instead of reading the stream: a parser really ran (it read the stream
 * to its end; Express 4 leaves `req.body = {}` when it did not parse, so the
 * value alone proves nothing), the declared type is JSON, and the declared
 * length is within the router's limit (unless it counts compressed bytes).
 * Otherwise undefined, and the router
 * reads the body itself, or refuses it without reading: 415 for a declared
 * non-JSON type (a form a host's `urlencoded()` parsed is still refused, as
 * on node:http) or charset, 413 for a declared length over its limit (the
 * host's parser may allow more).
 */
export function parsedBody(req: IncomingMessage, body: unknown, limit: number): unknown {
  if (body === undefined || !req.readableEnded) return undefined;
  return bodyFromParser(req, body, limit);
}

/**
 * parsedBody, for a body a parser is known to have left (the Fastify plugin's
 * own, from a host preParsing hook's stream). `counted`: the body is bytes
 * counted as they were read, so the declared length (what the client sent,
 * compressed say) does not decide the limit, the bytes do.
 */
export function bodyFromParser(req: IncomingMessage, body: unknown, limit: number, counted = false): unknown {
  const length = req.headers['content-length'];
  // A length that counts compressed bytes the parser inflated says nothing of the body (held against it below):
  // left to the router, the request would be refused for its Content-Encoding (415), not its size.
  const encoded = req.headers['content-encoding'] !== undefined;
  if (!counted && !encoded && length !== undefined && Number(length) > limit) return undefined;
  const header = req.headers['content-type'];
  const type = header === undefined || header === '' ? 'application/json' : mediaType(header);
  if (type !== 'application/json' && !type.endsWith('+json')) return undefined;
  // A parser may decode another charset (co-body ignores it): refused, as on node:http.
  if (header !== undefined && otherCharset(header) !== undefined) return undefined;
  // Raw text a parser left (express.raw, express.text): parsed by the router, as it parses its own reads.
  if (typeof body === 'string' || Buffer.isBuffer(body)) return new JsonText(body);
  if (length === undefined || encoded) {
    // No length declared (chunked), or one counting compressed bytes: the limit holds against the body as compact JSON,
    // about what the client sent (less its whitespace; plus numbers JSON writes out, like 1e20, and U+FFFD replacements).
    const text = compactJson(body);
    if (text !== undefined && Buffer.byteLength(text) > limit) return new JsonText(text); // its parse answers 413
  }
  dropUnsafeKeys(body);
  return body;
}

/** The body as compact JSON; undefined when it nests too deep to write (the router then answers json_too_deep). */
function compactJson(body: unknown): string | undefined {
  try {
    return JSON.stringify(body);
  } catch {
    return undefined;
  }
}

const UNSAFE_KEYS = ['__proto__', 'constructor', 'prototype'];

/**
 * Deletes keys named `__proto__`, `constructor` and `prototype` at any depth,
 * in place, as the router's own reader drops them: JSON.parse (express.json,
 * co-body) keeps them as own properties, which an action that merges its
 * params with Object.assign would turn into a prototype change. Iterative, so
 * a deeply nested body cannot overflow the stack.
 */
function dropUnsafeKeys(root: unknown): void {
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const value = stack.pop();
    if (typeof value !== 'object' || value === null) continue;
    const object = value as Record<string, unknown>;
    for (const key of UNSAFE_KEYS) if (Object.hasOwn(object, key)) delete object[key];
    for (const key in object) stack.push(object[key]);
  }
}
