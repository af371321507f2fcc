import { AgentRouterError } from '../errors.ts';

/** Members of every agent (and of Object) that `static actions` may never expose. */
export const RESERVED: ReadonlySet<string> = new Set<string>([
  'constructor', 'id', 'model', 'system', 'storage', 'state', 'messages', 'setState', 'chat', 'stream',
  'invoke', 'load', 'snapshot', 'busy', 'version', 'abandoned', 'lastMessages', 'maxSteps', 'tools', 'approve', 'pendingApprovals', '__proto__', 'prototype',
  ...Object.getOwnPropertyNames(Object.prototype),
]);

/**
 * The action names a class allows, checked once per class: each must be a
 * method the class defines, and none may be a built-in member. A mistake is a
 * TypeError that names the class and the fix, thrown when the class is first
 * used rather than when a caller happens to hit it.
 */
const checked = new WeakMap<Function, ReadonlySet<string>>();

export function actionsOf(ctor: Function & { actions?: unknown }): ReadonlySet<string> {
  const known = checked.get(ctor);
  if (known !== undefined) return known;
  const listed = ctor.actions ?? [];
  if (!Array.isArray(listed) || !listed.every((name) => typeof name === 'string')) {
    throw new TypeError(`${ctor.name}.actions must be an array of method names, e.g. static actions = ['increment']`);
  }
  for (const name of listed as string[]) {
    if (RESERVED.has(name)) {
      throw new TypeError(`${ctor.name}.actions lists "${name}", a built-in member; actions must be your own methods`);
    }
    const member = memberOf(ctor.prototype as object, name);
    if (typeof member?.value !== 'function') {
      // An arrow function field is set on each instance after the constructor, so no check can see it: named here, as it is the usual cause.
      const what =
        member?.get !== undefined
          ? 'a getter, not a method'
          : `no method of that name (a class field such as ${name} = async () => {...} is not a method: write async ${name}() {...})`;
      throw new TypeError(`${ctor.name}.actions lists "${name}", but ${ctor.name} has ${what}`);
    }
  }
  const names = new Set(listed as string[]);
  checked.set(ctor, names);
  return names;
}

/** A member's descriptor, looked up the prototype chain without calling a getter (reading one on the prototype would run it with no instance). */
export function memberOf(prototype: object, name: string): PropertyDescriptor | undefined {
  for (let at: object | null = prototype; at !== null; at = Object.getPrototypeOf(at)) {
    const member = Object.getOwnPropertyDescriptor(at, name);
    if (member !== undefined) return member;
  }
  return undefined;
}

export function unknownMethod(agentId: string, method: string): AgentRouterError {
  return new AgentRouterError(
    404,
    'unknown_method',
    `Agent ${JSON.stringify(agentId)} has no action ${JSON.stringify(method)}; list it in the class's static actions`,
  );
}

/**
 * Positional arguments an action may get. Spreading more overflows the stack
 * (500,000 did), and no action takes that many: a list is one argument,
 * `[[...]]`.
 */
export const MAX_ARGUMENTS = 256;

/** `params` on the wire: an array is positional, an object one argument, absent none. */
export function actionArguments(params: unknown): unknown[] {
  if (params === undefined || params === null) return [];
  if (!Array.isArray(params)) return [params];
  if (params.length > MAX_ARGUMENTS) {
    throw new AgentRouterError(400, 'too_many_params', `"params" holds ${params.length} positional arguments, more than ${MAX_ARGUMENTS}; pass a list as one argument: {"params": [[...]]}`);
  }
  return params;
}
