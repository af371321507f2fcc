/// <reference types="node" preserve="true" />
// Node's types for these declarations, as in index.ts.
import type { AgentRouter } from '../router/router.ts';
import { bodyLimitOf, checkRouter, parsedBody } from './common.ts';
import type { KoaMiddleware } from './shapes.ts';
export type { KoaContext, KoaMiddleware, KoaNext } from './shapes.ts';

/**
 * Mounts an AgentRouter in a Koa (2 or 3) app; the router's own `prefix` is
 * the mount path (`new AgentRouter(registry, { prefix: '/agents' })`). For
 * the router's paths it sets `ctx.respond = false` before anything is written
 * (Koa's escape hatch: the router writes the response, streams included);
 * every other path goes to `await next()`. A body a parser such as
 * `@koa/bodyparser` already read is used; otherwise the router reads it.
 *
 * @example
 * app.use(toKoa(new AgentRouter(registry, { prefix: '/agents' })));
 */
export function toKoa(router: AgentRouter): KoaMiddleware {
  checkRouter(router, 'toKoa');
  const limit = bodyLimitOf(router);
  return async (ctx, next) => {
    const target = ctx.url;
    if (!router.matches(ctx.req.method, target)) {
      await next();
      return;
    }
    ctx.respond = false;
    const handled = await router.handle(ctx.req, ctx.res, { path: target, body: parsedBody(ctx.req, (ctx.request as { body?: unknown }).body, limit) });
    if (handled) return;
    // Unreachable while matches() agrees with handle(); kept so a drift falls through instead of hanging.
    ctx.respond = true;
    await next();
  };
}
