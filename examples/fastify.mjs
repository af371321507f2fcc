import Fastify from 'fastify';
import { Agent, AgentRegistry, AgentRouter, echoModel } from 'agent-router';
import { toFastify } from 'agent-router/fastify';

class Bot extends Agent {
  constructor(id) { super(id, { model: echoModel() }); }
}
const registry = new AgentRegistry();
registry.register('bot-[0-9]+', Bot);

const app = Fastify();
await app.register(toFastify(new AgentRouter(registry)), { prefix: '/api' });   // POST /api/{agent_id}/chat ...
app.get('/api/health', async () => 'ok');                                       // more specific: yours
await app.listen({ port: 8000, host: '127.0.0.1' });
process.on('SIGTERM', () => app.close().then(() => process.exit(0)));          // lets running streams finish
