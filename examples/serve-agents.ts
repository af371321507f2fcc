/**
 * A module for `agent-router serve`: default-export a registry (or one Agent,
 * or an AgentServer) and the CLI serves it.
 *
 *   node --import tsx src/cli/main.ts serve examples/serve-agents.ts --port 8080
 *   curl 'http://127.0.0.1:8080/agent/notes-alice/invoke' -H 'content-type: application/json' \
 *     -d '{"method": "add", "params": {"text": "buy milk"}}'
 *   curl 'http://127.0.0.1:8080/agent/notes-alice/state'
 *
 * In your own project, import from 'agent-router' instead of '../src/index.ts'.
 */
import { Agent, AgentRegistry, AgentRouterError, echoModel, MemoryStorage } from '../src/index.ts';

// One storage for every instance: an agent the server drops when idle comes back with its notes.
const storage = new MemoryStorage();

class Notes extends Agent<{ notes: string[] }> {
  static override actions = ['add', 'clear'];

  constructor(id: string) {
    super(id, { model: echoModel(), storage, initialState: { notes: [] } });
  }

  /** Adds a note; returns how many there are. */
  async add({ text }: { text?: unknown } = {}): Promise<number> {
    if (typeof text !== 'string' || text === '') {
      throw new AgentRouterError(400, 'invalid_params', 'add takes {"text": "..."}');
    }
    await this.setState({ notes: [...this.state.notes, text] });
    return this.state.notes.length;
  }

  async clear(): Promise<number> {
    await this.setState({ notes: [] });
    return 0;
  }
}

const registry = new AgentRegistry();
registry.register('notes-[a-z0-9-]+', Notes);
export default registry;
