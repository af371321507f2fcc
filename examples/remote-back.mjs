// The back: an AgentServer that holds the agents. Run it first: node remote-back.mjs
import { Agent, AgentRegistry, AgentServer, echoModel } from 'agent-router';

class Bot extends Agent {
  constructor(id) { super(id, { model: echoModel() }); }
}
const registry = new AgentRegistry();
registry.register('.*', Bot);

const server = new AgentServer(registry);
await server.serve(8001);                                  // POST /agent/{agent_id}/chat ...
process.on('SIGTERM', () => server.close().then(() => process.exit(0)));
