import { Agent } from '../agent/agent.ts';
import { actionsOf } from '../agent/actions.ts';
import { AgentNotFoundError } from '../errors.ts';
import { isTransport, type AgentTransport } from '../transports/transport.ts';
import { compilePattern } from './patterns.ts';

/** A local agent class, instantiated as `new Target(agentId)`. */
export type AgentClass = new (agentId: string) => Agent<any>;
/** A local agent class, or a transport to a remote one. */
export type RegistryTarget = AgentClass | AgentTransport;

export interface RegisterOptions {
  /** Accept a pattern with nested quantifiers such as `(a+)+`, which are refused by default. */
  allowBacktracking?: boolean | undefined;
}

/** Distinct ids whose resolution is remembered; bounded so a flood of ids cannot grow memory. */
const CACHE_SIZE = 10_000;

/**
 * Maps agent ids to targets by pattern. Patterns are strings or RegExps,
 * always matched against the whole id; the first registered match wins, so
 * register specific patterns first and a catch-all (`.*`) last.
 *
 * @example
 * const registry = new AgentRegistry();
 * registry.register('counter-[0-9]+', Counter);
 * registry.register('remote-.*', new HTTPTransport('http://10.0.0.5:8080/agent'));
 */
export class AgentRegistry {
  readonly #patterns: Array<string | RegExp> = [];
  readonly #compiled: RegExp[] = [];
  readonly #targets: RegistryTarget[] = [];
  readonly #cache = new Map<string, RegistryTarget>();

  register(pattern: string | RegExp, target: RegistryTarget, options: RegisterOptions = {}): void {
    if (typeof pattern !== 'string' && !(pattern instanceof RegExp)) {
      throw new TypeError('AgentRegistry.register: pattern must be a string or a RegExp, e.g. "counter-[0-9]+"');
    }
    if (typeof target === 'function') {
      // What `new Target(id)` cannot make an Agent of (an arrow function, a class not extending Agent) would fail only at
      // its first request, as a 500. A plain function returning an Agent (a factory) is fine.
      if (!constructsAgents(target)) {
        throw new TypeError(`AgentRegistry.register: target ${target.name || '(anonymous function)'} cannot make agents with new ${target.name || 'Target'}(agentId); pass a class that extends Agent (class Bot extends Agent { ... })`);
      }
      actionsOf(target);
    } else if (target instanceof Agent) {
      throw new TypeError(
        `AgentRegistry.register: pass the Agent class, not an instance (register(pattern, ${target.constructor.name})): the registry makes one per id as new ${target.constructor.name}(agentId). To serve this one agent, use new AgentRouter(agent)`,
      );
    } else if (!isTransport(target)) {
      throw new TypeError(
        'AgentRegistry.register: target must be an Agent class (e.g. class Bot extends Agent) or a transport such as new HTTPTransport(url)',
      );
    }
    this.#compiled.push(compilePattern(pattern, options.allowBacktracking === true));
    this.#patterns.push(pattern);
    this.#targets.push(target);
    this.#cache.clear();
  }

  /** The routes in registration order, as `[pattern, target]`, the pattern as given: a copy (add with register). */
  get _routes(): Array<[string | RegExp, RegistryTarget]> {
    return this.#patterns.map((pattern, i) => [pattern, this.#targets[i] as RegistryTarget]);
  }

  /** The target of the first pattern matching the whole id; throws AgentNotFoundError if none does. */
  resolve(agentId: string): RegistryTarget {
    const cached = this.#cache.get(agentId);
    if (cached !== undefined) return cached;
    for (let i = 0; i < this.#compiled.length; i++) {
      if (!(this.#compiled[i] as RegExp).test(agentId)) continue;
      const target = this.#targets[i] as RegistryTarget;
      if (this.#cache.size >= CACHE_SIZE) this.#cache.delete(this.#cache.keys().next().value as string);
      this.#cache.set(agentId, target);
      return target;
    }
    throw new AgentNotFoundError(agentId);
  }
}

/** An Agent class, or a plain function (a factory `new` can call); not an arrow function or another class. */
function constructsAgents(target: Function): boolean {
  if (target === Agent || target.prototype instanceof Agent) return true;
  if (target.prototype === undefined) return false;
  return !/^class\b/.test(Function.prototype.toString.call(target));
}
