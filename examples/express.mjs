import express from 'express';
import { Agent, AgentRegistry, AgentRouter, echoModel } from 'agent-router';
import { toExpress } from 'agent-router/express';

class Bot extends Agent {
  constructor(id) { super(id, { model: echoModel() }); }
}
const registry = new AgentRegistry();
registry.register('bot-[0-9]+', Bot);

const app = express();
const router = new AgentRouter(registry);
app.use('/api', toExpress(router));                      // POST /api/{agent_id}/chat ...
app.use(express.json());                                 // your own routes' parser, after the router
app.get('/api/health', (req, res) => res.send('ok'));    // not the router's: reaches you
app.listen(8000);
