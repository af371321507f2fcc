import { Agent } from '../agent/agent.ts';
import { AgentRouterError } from '../errors.ts';
import { echoModel } from '../models/echo.ts';
import type { Model } from '../models/model.ts';
import { AgentRegistry } from '../registry/registry.ts';
import type { Storage } from '../storage/storage.ts';

export interface DemoOptions {
  storage: Storage;
  /** The model of the `chat-*` agents. @defaultValue echoModel() */
  chatModel?: Model | undefined;
}

/**
 * The registry `agent-router serve` runs without a module: `echo-*` agents
 * (the offline echo model), `chat-*` agents (a real model when an API key is
 * set, echo otherwise) and `counter-*` agents with an `increment` action.
 */
export function demoRegistry(options: DemoOptions): AgentRegistry {
  const { storage } = options;
  const chatModel = options.chatModel ?? echoModel();

  class EchoAgent extends Agent {
    constructor(id: string) {
      super(id, { model: echoModel(), storage });
    }
  }

  class ChatAgent extends Agent {
    constructor(id: string) {
      super(id, { model: chatModel, storage, system: 'You are a concise, helpful assistant.' });
    }
  }

  class CounterAgent extends Agent<{ count: number }> {
    static override actions = ['increment'];
    constructor(id: string) {
      super(id, { model: echoModel(), storage, initialState: { count: 0 } });
    }

    /** Adds `by` (default 1) to the count and returns the new count. */
    async increment(params: { by?: unknown } | number = {}): Promise<number> {
      const by = typeof params === 'number' ? params : (params.by ?? 1);
      if (typeof by !== 'number' || !Number.isFinite(by)) {
        throw new AgentRouterError(400, 'invalid_params', 'increment takes {"by": <number>}, e.g. {"method": "increment", "params": {"by": 2}}');
      }
      await this.setState({ count: this.state.count + by });
      return this.state.count;
    }
  }

  const registry = new AgentRegistry();
  registry.register('echo-.*', EchoAgent);
  registry.register('chat-.*', ChatAgent);
  registry.register('counter-.*', CounterAgent);
  return registry;
}

/** What the demo prints once it listens: the agents, where they live, and curl lines to paste. */
export function demoBanner(url: string, storage: string, chatModel: string): string {
  const json = "-H 'content-type: application/json'";
  return [
    '',
    'Demo agents (any id after the dash works):',
    '  echo-*     echoes your message back, word by word (offline)',
    `  chat-*     a chat agent on ${chatModel}`,
    '  counter-*  keeps a count; action: increment {"by": n}',
    `Storage: ${storage}`,
    '',
    'Try:',
    `  curl '${url}/agent/echo-1/chat' ${json} -d '{"message": "Hello, agent"}'`,
    `  curl -N '${url}/agent/echo-1/chat?stream=true' ${json} -d '{"message": "Stream these words"}'`,
    `  curl '${url}/agent/counter-1/invoke' ${json} -d '{"method": "increment", "params": {"by": 2}}'`,
    `  curl '${url}/agent/counter-1/state'`,
    `  curl '${url}/healthz'`,
    '',
    'Ctrl-C stops the server (running turns get to finish).',
    '',
  ].join('\n');
}
