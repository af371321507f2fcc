/**
 * Throws a TypeError when `value` is not JSON as it is: what `JSON.stringify`
 * refuses (a BigInt, a cycle) and what it would silently change (NaN or
 * Infinity to null, a function or symbol dropped, a Map, Set, RegExp or
 * Error to `{}`, a typed array to an object of indexes).
 * State and action results go over the wire and into storage as JSON; caught
 * here, before the turn commits, a bad value fails its turn (changing
 * nothing) instead of being half-stored or breaking every later read.
 */
export function assertJson(value: unknown, what: string): void {
  check(value, what, false);
}

/**
 * {@link assertJson}, and also refuses what JSON turns into something else
 * through its `toJSON()` (a Date into a string, a Buffer into an object) or
 * by dropping its prototype (a class instance into a plain object): a result
 * may be sent that way, but state must read back as it was written, or the
 * agent would find a Date in memory and a string after a restart.
 */
export function assertJsonState(value: unknown, what: string): void {
  check(value, what, true);
}

function check(value: unknown, what: string, refuseToJSON: boolean): void {
  let problem: string | undefined;
  try {
    JSON.stringify(value, function (this: Record<string, unknown>, key, inner: unknown) {
      if (problem === undefined) problem = problemOf(inner, key, refuseToJSON);
      if (problem === undefined && refuseToJSON) {
        const original = this[key]; // before toJSON(), which JSON.stringify applied to give `inner`
        if (inner !== original && hasToJSON(original)) problem = convertedBy(original, key);
      }
      return problem === undefined ? inner : undefined;
    });
  } catch (error) {
    // JSON.stringify throws a TypeError for a cycle, a RangeError when nesting overflows the stack;
    // anything else came from a value's own toJSON().
    const cycle = error instanceof TypeError && /circular/i.test(error.message);
    problem ??= error instanceof RangeError ? 'values nested too deeply to write' : cycle ? 'a circular reference' : 'a value whose toJSON() threw';
  }
  if (problem !== undefined) throw new TypeError(`${what} is not JSON: it holds ${problem}`);
}

function at(key: string): string {
  return key === '' ? '' : ` (key ${JSON.stringify(key.slice(0, 64))})`;
}

function problemOf(value: unknown, key: string, state: boolean): string | undefined {
  switch (typeof value) {
    case 'number':
      return Number.isFinite(value) ? undefined : `${String(value)}${at(key)}`;
    case 'bigint':
      return `a BigInt${at(key)}`;
    case 'function':
    case 'symbol':
      return `a ${typeof value}${at(key)}`;
    case 'object':
      return value === null ? undefined : objectProblem(value, key, state);
    default:
      return undefined;
  }
}

/**
 * A plain object or array is JSON. Built-ins that JSON writes as `{}` or as
 * an object of indexes (a Map, a RegExp, an Error, a typed array) are
 * refused anywhere; in state, so is any other object with a prototype of its
 * own (a class instance, a boxed number), which would come back from
 * storage as a plain object or value, without its methods.
 */
function objectProblem(value: object, key: string, state: boolean): string | undefined {
  const prototype = Object.getPrototypeOf(value) as unknown;
  if (prototype === Object.prototype || prototype === Array.prototype || prototype === null || isPlainOfOtherRealm(value, prototype)) return undefined;
  // An action written as a generator returns one unstarted: its body never runs, and JSON writes it as {}.
  const tag = Object.prototype.toString.call(value);
  if (tag === '[object Generator]' || tag === '[object AsyncGenerator]') return `a generator${at(key)} (an action returns its result; a generator action never runs)`;
  const name = (value as { constructor?: { name?: unknown } }).constructor?.name;
  const what = typeof name === 'string' && name !== '' ? `${/^[AEIO]/.test(name) ? 'an' : 'a'} ${name}` : 'an object';
  if (LOST_BY_JSON.some((type) => value instanceof type) || ArrayBuffer.isView(value)) return `${what}${at(key)}`;
  if (!state) return undefined;
  const boxed = value instanceof Number || value instanceof String || value instanceof Boolean;
  return `${what}${at(key)}, which would come back from storage as a plain ${Array.isArray(value) ? 'array' : boxed ? 'value' : 'object'}`;
}

/** A plain object or array made in another realm (a vm context, a test runner's sandbox): its own Object or Array. */
function isPlainOfOtherRealm(value: object, prototype: unknown): boolean {
  const name = (prototype as { constructor?: { name?: unknown } }).constructor?.name;
  if (Array.isArray(value)) return name === 'Array' && Object.getPrototypeOf(Object.getPrototypeOf(prototype)) === null;
  return name === 'Object' && Object.getPrototypeOf(prototype) === null;
}

const LOST_BY_JSON: Array<abstract new (...args: never[]) => object> = [Map, Set, WeakMap, WeakSet, RegExp, Error, Promise, ArrayBuffer];

function hasToJSON(value: unknown): boolean {
  return typeof value === 'object' && value !== null && typeof (value as { toJSON?: unknown }).toJSON === 'function';
}

/** `original` is what the holder has, before `toJSON()` replaced it. */
function convertedBy(original: unknown, key: string): string {
  if (original instanceof Date) return `a Date${at(key)}, which would come back as a string; store date.toISOString() or date.getTime()`;
  const name = (original as { constructor?: { name?: string } } | null)?.constructor?.name;
  return `${typeof name === 'string' && name !== '' ? `a ${name}` : 'a value'}${at(key)} that JSON stores as its toJSON(), so it would come back as something else`;
}
