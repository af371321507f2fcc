import { Agent, AgentRegistry, AgentServer, echoModel } from 'agent-router';

class Bot extends Agent {
  constructor(id) {
    super(id, { model: echoModel(), system: 'You are helpful.' });
  }
}

const registry = new AgentRegistry();
registry.register('bot-[0-9]+', Bot);

const server = new AgentServer(registry, { idleTimeout: 300, maxAgents: 1000, enableListAgents: false });
await server.serve(8080);            // host defaults to 127.0.0.1 (this machine only); '0.0.0.0' for all
console.log(server.url);             // http://127.0.0.1:8080; serve(0) picks a free port, then server.port has it
process.on('SIGTERM', () => server.close().then(() => process.exit(0)));
