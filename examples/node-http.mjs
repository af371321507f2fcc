import http from 'node:http';
import { Agent, AgentRegistry, AgentRouter, echoModel } from 'agent-router';

class Counter extends Agent {
  static actions = ['increment'];          // the only methods /invoke may call
  constructor(id) {                        // a registry class gets the id only
    super(id, { model: echoModel(), initialState: { count: 0 } });
  }
  async increment({ by = 1 } = {}) {
    await this.setState({ count: this.state.count + by });
    return this.state.count;
  }
}

const registry = new AgentRegistry();
registry.register('counter-[0-9]+', Counter);
http.createServer(new AgentRouter(registry).toRequestListener()).listen(8000);
