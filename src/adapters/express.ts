/// <reference types="node" preserve="true" />
// Node's types for these declarations, as in index.ts.
import type { AgentRouter } from '../router/router.ts';
import { bodyLimitOf, checkRouter, parsedBody } from './common.ts';
import type { ExpressMiddleware } from './shapes.ts';
export type { ExpressMiddleware, ExpressNext, ExpressRequest } from './shapes.ts';

/**
 * Mounts an AgentRouter in an Express (4 or 5) app. Express's mount path
 * comes first (`req.url` is already relative to it, `req.originalUrl` is left
 * alone), then the router's own `prefix`. A path that is not the router's
 * goes to `next()`, so host routes keep working. A body `express.json()`
 * already parsed is used; without a body parser the router reads the body.
 *
 * Body-parser errors (`express.json()`'s own 400 and 413) go to Express's
 * error handlers, never to this middleware: mount it before `express.json()`
 * to have the router's JSON errors (docs/guide/frameworks.md).
 *
 * @example
 * app.use('/api', toExpress(new AgentRouter(registry)));   // POST /api/{agent_id}/chat
 */
export function toExpress(router: AgentRouter): ExpressMiddleware {
  checkRouter(router, 'toExpress');
  const limit = bodyLimitOf(router);
  return (req, res, next) => {
    // A getter: read only once the router owns the request, so a body bound for a host route under the
    // same mount is left as the host's parser made it (parsedBody drops `constructor` keys in place).
    const hint = {
      path: req.url,
      get body(): unknown {
        return parsedBody(req, req.body, limit);
      },
    };
    router.handle(req, res, hint).then(
      (handled) => {
        if (!handled) next();
      },
      next,
    );
  };
}
