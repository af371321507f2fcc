/**
 * The JSON checks every layer shares: what a request body, a remote's reply
 * or an agent's state may hold, and how deep.
 */
import { AgentRouterError, httpErrors } from '../errors.ts';

/**
 * Deepest nesting of arrays and objects accepted. Deeper bodies are refused
 * before parsing: a few thousand levels overflow the stack in
 * structuredClone and JSON.stringify later, as a 500 far from the cause.
 */
export const MAX_JSON_DEPTH = 100;

/** Keys that could reach a prototype when user code merges a body into an object; any `\u` escape too, since `"\u005f_proto__"` parses as `__proto__`. */
const UNSAFE_KEY = /"(?:__proto__|constructor|prototype)"\s*:|\\u/;

/** Parses JSON text as a body: `{}` when blank; 400 when invalid, too deep or holding an Infinity; prototype keys dropped. */
export function parseJson(text: string): unknown {
  // A byte order mark may lead JSON text, and parsers may ignore it (RFC 8259, 8.1).
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  if (text.trim() === '') return {};
  // Nesting deeper than the limit needs at least twice as many characters.
  if (text.length > 2 * MAX_JSON_DEPTH && nestingDepth(text) > MAX_JSON_DEPTH) {
    throw httpErrors.badRequest('json_too_deep', `JSON body is nested deeper than ${MAX_JSON_DEPTH} levels`);
  }
  const unsafe = UNSAFE_KEY.test(text);
  const huge = HUGE_NUMBER.test(text);
  let value: unknown;
  try {
    value = unsafe || huge ? JSON.parse(text, unsafe ? dropUnsafeKeys : undefined) : JSON.parse(text);
  } catch {
    throw httpErrors.badRequest('invalid_json', 'Invalid JSON body');
  }
  // Nesting was checked on the text above; the walk is for the numbers.
  return huge ? checkParsed(value) : value;
}

/**
 * Refuses a parsed body that nests deeper than MAX_JSON_DEPTH (the rule
 * `parseJson` applies to text) or holds a number JSON cannot carry
 * (Infinity: see HUGE_NUMBER). For a body a framework already parsed, and
 * for parseJson's own when its text has such a number. Iterative, so
 * checking a hostile body cannot overflow the stack itself.
 */
export function checkParsed<T>(value: T): T {
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length > 0) {
    const [node, depth] = stack.pop() as [unknown, number];
    if (typeof node === 'number' && !Number.isFinite(node)) throw numberOutOfRange();
    if (typeof node !== 'object' || node === null) continue;
    if (depth > MAX_JSON_DEPTH) {
      throw httpErrors.badRequest('json_too_deep', `JSON body is nested deeper than ${MAX_JSON_DEPTH} levels`);
    }
    for (const child of Object.values(node)) stack.push([child, depth + 1]);
  }
  return value;
}

/**
 * A number JSON can write but JavaScript cannot hold (`1e999`, 309 digits)
 * parses as Infinity, which no state or reply can carry (JSON writes it as
 * null). Only text with such an exponent or run of digits is walked: with
 * an exponent of two digits at most, a number needs 210 digits before its
 * point to pass 1.8e308 (JSON allows no leading zeros), so 209 in a row
 * catch it, and 309 without one. The lookbehind tries a run of digits from
 * its start only: otherwise every digit of a long body would start a scan.
 */
const HUGE_NUMBER = /[eE][+-]?\d{3}|(?<!\d)\d{209}/;

/** Whether JSON text may hold a number JSON.parse makes Infinity (see HUGE_NUMBER): only such text needs walking. */
export function mayHoldHugeNumber(text: string): boolean {
  return HUGE_NUMBER.test(text);
}

function numberOutOfRange(): AgentRouterError {
  return httpErrors.badRequest('invalid_json', 'Invalid JSON body: a number is too large to represent (it would be Infinity)');
}

/** The deepest bracket nesting outside strings (the JSON need not be valid). */
export function nestingDepth(text: string): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (inString) {
      if (code === 92 /* \\ */) i++;
      else if (code === 34 /* " */) inString = false;
    } else if (code === 34) inString = true;
    else if (code === 91 /* [ */ || code === 123 /* { */) {
      if (++depth > deepest) deepest = depth;
    } else if (code === 93 /* ] */ || code === 125 /* } */) depth--;
  }
  return deepest;
}

function dropUnsafeKeys(key: string, value: unknown): unknown {
  return key === '__proto__' || key === 'constructor' || key === 'prototype' ? undefined : value;
}

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
