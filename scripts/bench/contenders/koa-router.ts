/** Our router inside Koa 3: `app.use(toKoa(router))` (the router reads the body itself). */
import http from 'node:http';
import { toKoa } from '../../../src/adapters/koa.ts';
import { AgentRouter } from '../../../src/router/router.ts';
import { benchRegistry, CAPACITY } from './agents.ts';
import { loadKoa } from './frameworks.ts';
import { announce, listen } from './ipc.ts';

const router = new AgentRouter(benchRegistry(), { maxStreams: CAPACITY, maxAgents: CAPACITY });
const Koa = await loadKoa();
const app = new Koa();
app.use(toKoa(router) as Parameters<typeof app.use>[0]);
announce('koa-router', await listen(http.createServer(app.callback())), '', { count: () => router.pool?.size ?? 0 });
