/**
 * Koa 3, native route: `@koa/bodyparser` and a hand-written path match in
 * one middleware (Koa has no router of its own, and `@koa/router` is not a
 * dev dependency here), replying through `ctx.body`.
 */
import http from 'node:http';
import { loadKoa, loadKoaBodyParser } from './frameworks.ts';
import { announce, listen } from './ipc.ts';
import { BAD_MESSAGE, chatReply, nativeHooks, stateReply } from './native-handlers.ts';

const Koa = await loadKoa();
const bodyParser = await loadKoaBodyParser();
const app = new Koa();
app.use(bodyParser());
app.use((ctx, next) => {
  const path = ctx.path;
  const slash = path.indexOf('/', 1);
  if (slash <= 1) return next();
  const id = path.slice(1, slash);
  const action = path.slice(slash);
  if (action === '/state' && ctx.method === 'GET') {
    ctx.body = stateReply(id);
    return undefined;
  }
  if (action !== '/chat' || ctx.method !== 'POST') return next();
  const body = chatReply(id, ctx.request.body);
  ctx.status = body === undefined ? 400 : 200;
  ctx.body = body ?? BAD_MESSAGE;
  return undefined;
});
announce('koa', await listen(http.createServer(app.callback())), '', nativeHooks);
