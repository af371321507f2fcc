import Koa from 'koa';
import { bodyParser } from '@koa/bodyparser';
import { Agent, AgentRegistry, AgentRouter, echoModel } from 'agent-router';
import { toKoa } from 'agent-router/koa';

class Bot extends Agent {
  constructor(id) { super(id, { model: echoModel() }); }
}
const registry = new AgentRegistry();
registry.register('bot-[0-9]+', Bot);

const app = new Koa();
const router = new AgentRouter(registry, { prefix: '/api' });
app.use(toKoa(router));                                          // POST /api/{agent_id}/chat ...
app.use(bodyParser());                                           // your own routes' parser, after the router
app.use((ctx) => { if (ctx.path === '/api/health') ctx.body = 'ok'; });
app.listen(8000);
