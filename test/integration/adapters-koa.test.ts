// toKoa against the real Koa 2 and 3 (npm aliases koa2, koa3), with and
// without @koa/bodyparser in front.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bodyParser } from '@koa/bodyparser';
import Koa2 from 'koa2';
import Koa3 from 'koa3';
import { toKoa } from '../../src/adapters/koa.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { listen } from '../helpers/listen.ts';
import { assertError, checkRegistryRoutes, checkServedOpenAPI, checkSingleRoutes, makeRegistryRouter, makeSingleRouter, post } from './adapters-shared.ts';

/**
 * The README's recipe for a host that must run a body parser before the
 * router: its refusals propagate up through `await next()` and never reach
 * the router, so an outer middleware answers them in the router's shape.
 */
const BODY_PARSER_CODES: Record<string, string> = {
  'entity.parse.failed': 'invalid_json',
  'entity.too.large': 'body_too_large',
  'charset.unsupported': 'unsupported_media_type',
  'encoding.unsupported': 'unsupported_media_type',
};
async function bodyParserErrors(ctx: any, next: () => Promise<unknown>): Promise<void> {
  try {
    await next();
  } catch (err: any) {
    // co-body's JSON.parse failure carries status 400 but no type.
    const code = err?.status === 400 && err instanceof SyntaxError ? 'invalid_json' : BODY_PARSER_CODES[err?.type];
    if (code === undefined) throw err;
    ctx.status = err.status;
    ctx.body = { error: code === 'invalid_json' ? 'Invalid JSON body' : err.message, code };
  }
}

/** The host's own routes, beside and under the router's prefix. */
async function hostRoutes(ctx: any, next: () => Promise<unknown>): Promise<void> {
  if (ctx.method === 'GET' && ctx.path === '/health') ctx.body = 'ok';
  else if (ctx.method === 'GET' && ctx.path === '/api/host/info') ctx.body = { host: 'info' };
  else if (ctx.method === 'POST' && ctx.path === '/api/host/echo') ctx.body = { echoed: ctx.request.body };
  else if (ctx.method === 'GET' && (ctx.path === '/api/status' || ctx.path === '/api/v1/status')) ctx.body = 'up';
  else await next();
}

for (const [name, Koa] of [['koa2', Koa2], ['koa3', Koa3]] as const) {
  test(`${name}: @koa/bodyparser before the router, prefix /api`, async (t) => {
    const fixture = makeRegistryRouter({ prefix: '/api' });
    const app = new Koa();
    app.use(bodyParserErrors);
    app.use(bodyParser());
    app.use(toKoa(fixture.router));
    app.use(hostRoutes);
    const { url, close } = await listen(app.callback());
    t.after(close);
    // co-body (behind @koa/bodyparser) refuses __proto__ keys itself: a 400 the recipe answers as invalid JSON.
    await checkRegistryRoutes(t, { origin: url, base: '/api', fixture, unsafeKeys: 'refused', hostParser: true });
  });

  test(`${name}: no body parser before the router, prefix /api/v1`, async (t) => {
    const fixture = makeRegistryRouter({ prefix: '/api/v1', openapi: true });
    const app = new Koa();
    app.use(toKoa(fixture.router));
    app.use(bodyParser()); // after the router: only the host's routes see it
    app.use(hostRoutes);
    const { url, close } = await listen(app.callback());
    t.after(close);
    await checkRegistryRoutes(t, { origin: url, base: '/api/v1', fixture });
    await checkServedOpenAPI(t, `${url}/api/v1/openapi.json`, '/api/v1/{agent_id}/chat', undefined);
    await t.test('POST openapi.json is still a generic request, to an agent of that id', async () => {
      await assertError(await post(`${url}/api/v1/openapi.json`, { action: 'state' }), 404, 'agent_not_found');
    });
  });

  test(`${name}: a single-agent router with its own prefix`, async (t) => {
    const app = new Koa();
    app.use(bodyParser());
    app.use(toKoa(makeSingleRouter({ prefix: '/bot' })));
    const { url, close } = await listen(app.callback());
    t.after(close);
    await checkSingleRoutes(t, url, '/bot');
  });

  test(`${name}: a router that declines a path it was expected to own falls through`, async (t) => {
    const router = new (class extends AgentRouter {
      override async handle(): Promise<boolean> {
        return false;
      }
    })(new AgentRegistry());
    const app = new Koa();
    app.use(toKoa(router));
    app.use(async (ctx: any) => {
      ctx.body = { fell: 'through', respond: ctx.respond };
    });
    const { url, close } = await listen(app.callback());
    t.after(close);
    const res = await post(`${url}/x/chat`, { message: 'hi' });
    assert.deepEqual(await res.json(), { fell: 'through', respond: true });
  });
}
