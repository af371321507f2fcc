import { Agent } from '../../src/agent/agent.ts';
import { AgentRouter, type AgentRouterOptions } from '../../src/router/router.ts';
import { echoModel } from '../../src/models/echo.ts';
import { AgentRegistry, type AgentClass } from '../../src/registry/registry.ts';
import type { Storage } from '../../src/storage/storage.ts';
import { listen } from './listen.ts';

/** The tests' counter agent: `increment({by})` adds to `count`. */
export interface CounterAgent extends Agent<{ count: number }> {
  increment(params?: { by?: number }): Promise<number>;
}

/** A counter class (an echo agent with an `increment` action) on the given storage. */
export function counterOn(storage: Storage): { new (id: string): CounterAgent; actions: readonly string[] } {
  return class Counter extends Agent<{ count: number }> {
    static override actions = ['increment'];
    constructor(id: string) {
      super(id, { model: echoModel(), storage, initialState: { count: 0 } });
    }
    async increment({ by = 1 }: { by?: number } = {}): Promise<number> {
      await this.setState({ count: this.state.count + by });
      return this.state.count;
    }
  };
}

/** An echo agent class on the given storage. */
export function echoOn(storage: Storage): AgentClass {
  return class Echo extends Agent {
    constructor(id: string) {
      super(id, { model: echoModel(), storage });
    }
  };
}

/**
 * Serves `agentClass` for every id on 127.0.0.1, port 0, until the test ends;
 * resolves with its URL. The router logs nothing unless `options` gives a
 * logger: these tests fail turns on purpose.
 */
export async function serveAgents(t: { after: (fn: () => unknown) => void }, agentClass: AgentClass, options: AgentRouterOptions = {}): Promise<string> {
  const registry = new AgentRegistry();
  registry.register('.*', agentClass);
  const { url, close } = await listen(new AgentRouter(registry, { logger: { error: () => undefined }, ...options }).toRequestListener());
  t.after(close);
  return url;
}
