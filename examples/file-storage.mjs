import { Agent, AgentRegistry, AgentServer, FileStorage, echoModel } from 'agent-router';

// One journal file per agent id under ./data/agents; a restart finds every conversation.
const storage = new FileStorage('./data/agents');
class Bot extends Agent {
  constructor(id) { super(id, { model: echoModel(), storage }); }
}
const registry = new AgentRegistry();
registry.register('bot-[0-9]+', Bot);

const server = new AgentServer(registry);
await server.serve(8080);                          // POST /agent/bot-1/chat
process.on('SIGTERM', async () => { await server.close(); await storage.close(); });
