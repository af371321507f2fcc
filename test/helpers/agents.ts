import { Agent } from '../../src/agent/agent.ts';
import { echoModel } from '../../src/models/echo.ts';
import type { Storage } from '../../src/storage/storage.ts';

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
