// Compiled by `tsc` (npm test's type-check), never run: which state types an
// Agent accepts. Each @ts-expect-error fails the build if the line compiles.
import { Agent, type AgentOptions } from '../../src/agent/agent.ts';
import { echoModel } from '../../src/models/echo.ts';
import type { JsonObject } from '../../src/types.ts';

interface User { name: string; tags: readonly string[] }
interface CartState { items: string[]; total: number; owner?: User; note: string | null }

// Interfaces, readonly arrays, optional fields and nested objects are JSON.
export class Cart extends Agent<CartState> {
  static override actions = ['add'];
  constructor(id: string) {
    super(id, { model: echoModel(), initialState: { items: [], total: 0, note: null } });
  }
  async add(item: string): Promise<number> {
    const state = await this.setState((s) => ({ items: [...s.items, item], total: s.total + 1 }));
    return state.total;
  }
}
export class Pairs extends Agent<{ pair: [number, string]; matrix: number[][] }> {}
export class Untyped extends Agent {}

// Generic code written against the JsonObject bound still compiles.
export class Base<S extends JsonObject = JsonObject> extends Agent<S> {}
export function optionsFor<S extends JsonObject>(initialState: S): AgentOptions<S> {
  return { model: echoModel(), initialState };
}
export async function bump<S extends JsonObject>(agent: Agent<S>, change: Partial<S>): Promise<S> {
  return agent.setState(change);
}

// What JSON would refuse or turn into something else does not compile.
// @ts-expect-error a Date comes back from storage as a string
export class Dated extends Agent<{ at: Date }> {}
// @ts-expect-error a function is dropped by JSON
export class WithFunction extends Agent<{ run: () => void }> {}
// @ts-expect-error a Map is stored as {}
export class WithMap extends Agent<{ seen: Map<string, number> }> {}
// @ts-expect-error a BigInt cannot be stored at all
export class WithBigInt extends Agent<{ big: bigint }> {}
// @ts-expect-error nested as deep as it likes
export class Nested extends Agent<{ a: { b: { c: Date }[] } }> {}

export async function typedState(cart: Cart): Promise<void> {
  const total: number = cart.state.total;
  // @ts-expect-error setState checks the fields it is given
  await cart.setState({ total: 'many' });
  void total;
}
