/**
 * A small validator for the JSON Schema subset that tool definitions use
 * (what OpenAI's and Anthropic's tool examples, Zod's and Pydantic's output
 * need): `type`, `properties`, `required`, `additionalProperties`, `enum`,
 * `const`, `items`, `minimum`, `maximum`, `exclusiveMinimum`,
 * `exclusiveMaximum`, `minLength`, `maxLength`, `minItems`, `maxItems`,
 * `anyOf`, plus annotations that check nothing (`description`, `title`,
 * `default`, `examples`, `format`, ...). A keyword outside it is refused
 * when the schema is compiled: silently ignored, it would let through the
 * very arguments it was written to stop.
 */

/** A schema: an object of keywords, or `true` (anything) / `false` (nothing). */
export type JsonSchema = boolean | { readonly [keyword: string]: unknown };

/** One way a value fails its schema: `path` names the place (`arguments.city`, `arguments.days[2]`). */
export interface SchemaError {
  path: string;
  message: string;
}

export interface CompiledSchema {
  /**
   * The ways `value` fails the schema, at most {@link MAX_ERRORS}; empty
   * when it matches. `root` names the value in each path.
   * @defaultValue `'arguments'`
   */
  validate(value: unknown, root?: string): SchemaError[];
}

/** A model corrects its call from the first few errors; a list of thousands (a huge array of wrong items) helps no one. */
export const MAX_ERRORS = 20;

const TYPES = new Set(['null', 'boolean', 'object', 'array', 'number', 'integer', 'string']);

/** Keywords that describe and check nothing: `format` is an annotation unless a validator opts in, as JSON Schema 2020-12 says. */
const ANNOTATIONS = new Set(['description', 'title', 'default', 'examples', '$schema', '$id', '$comment', 'format', 'deprecated', 'readOnly', 'writeOnly']);

/** Known keywords this library does not check, with the fix to offer. */
const UNSUPPORTED: Readonly<Record<string, string>> = {
  oneOf: 'use anyOf',
  allOf: 'merge the schemas into one',
  $ref: 'write the referenced schema in place',
  $defs: 'write each definition in place where it is used',
  definitions: 'write each definition in place where it is used',
  nullable: 'use type: ["string", "null"] (or the type you need with "null")',
  patternProperties: 'use additionalProperties with a schema',
  prefixItems: 'use items with one schema for every item',
};

type Check = (value: unknown, path: string, errors: SchemaError[]) => void;
type Schema = { readonly [keyword: string]: unknown };

/**
 * Compiles a schema once, checking it: an unknown keyword or a keyword with
 * a bad value throws a TypeError naming `where`, the keyword and its place
 * in the schema (a JSON pointer such as `/properties/city`).
 *
 * @param where names the schema in errors, e.g. `Weather.tools.forecast.parameters`.
 * @example compileSchema({ type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, 'forecast').validate({})
 *          // [{ path: 'arguments.city', message: 'required' }]
 */
export function compileSchema(schema: unknown, where: string): CompiledSchema {
  const check = compile(schema, '', where);
  return {
    validate(value, root = 'arguments') {
      const errors: SchemaError[] = [];
      check(value, root, errors);
      return errors.length > MAX_ERRORS ? errors.slice(0, MAX_ERRORS) : errors;
    },
  };
}

/** Errors as one line a model (or a person) can act on: `arguments.city: required; arguments.units: must be one of "c", "f"`. */
export function formatSchemaErrors(errors: readonly SchemaError[]): string {
  return errors.map((error) => `${error.path}: ${error.message}`).join('; ');
}

function compile(schema: unknown, pointer: string, where: string): Check {
  const at = pointer === '' ? 'the schema root' : pointer;
  const fail = (what: string): TypeError => new TypeError(`${where}: ${what} at ${at}`);
  if (schema === true) return () => {};
  if (schema === false) return (_, path, errors) => void errors.push({ path, message: 'is not allowed here' });
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) {
    throw fail(`a schema must be an object (or true/false), got ${kind(schema)}`);
  }
  const s = schema as Schema;
  for (const keyword of Object.keys(s)) {
    if (Object.hasOwn(KEYWORDS, keyword) || ANNOTATIONS.has(keyword)) continue;
    const fix = Object.hasOwn(UNSUPPORTED, keyword) ? UNSUPPORTED[keyword] : 'remove it, or check that rule in the tool itself';
    throw fail(`unknown keyword ${JSON.stringify(keyword)} (this library checks ${Object.keys(KEYWORDS).join(', ')}); ${fix}`);
  }
  const checks: Check[] = [];
  const typeCheck = s['type'] === undefined ? undefined : compileType(s['type'], fail);
  for (const keyword of Object.keys(KEYWORDS)) {
    if (s[keyword] === undefined || keyword === 'type') continue;
    const make = KEYWORDS[keyword] as Compiler;
    const check = make(s[keyword], s, { pointer: `${pointer}/${keyword}`, where, fail: (what) => fail(`"${keyword}" ${what}`) });
    if (check !== undefined) checks.push(check);
  }
  return (value, path, errors) => {
    // A value of the wrong type fails every other keyword for the same reason: one error says it.
    if (typeCheck !== undefined && !typeCheck(value, path, errors)) return;
    for (const check of checks) {
      if (errors.length > MAX_ERRORS) return;
      check(value, path, errors);
    }
  };
}

interface Place {
  pointer: string;
  where: string;
  fail: (what: string) => TypeError;
}
type Compiler = (argument: unknown, schema: Schema, place: Place) => Check | undefined;

const KEYWORDS: Readonly<Record<string, Compiler>> = {
  type: () => undefined, // compiled first, apart: see compile()
  properties(argument, schema, place) {
    if (!isPlainObject(argument)) throw place.fail('must be an object of property schemas');
    const known = new Map<string, Check>();
    for (const key of Object.keys(argument)) known.set(key, compile(argument[key], `${place.pointer}/${escapePointer(key)}`, place.where));
    return (value, path, errors) => {
      if (!isPlainObject(value)) return;
      for (const [key, check] of known) if (Object.hasOwn(value, key)) check(value[key], child(path, key), errors);
    };
  },
  required(argument, _, place) {
    if (!Array.isArray(argument) || !argument.every((name) => typeof name === 'string')) throw place.fail('must be an array of property names');
    const names = argument as string[];
    return (value, path, errors) => {
      if (!isPlainObject(value)) return;
      for (const name of names) if (!Object.hasOwn(value, name)) errors.push({ path: child(path, name), message: 'required' });
    };
  },
  additionalProperties(argument, schema, place) {
    const properties = isPlainObject(schema['properties']) ? Object.keys(schema['properties']) : [];
    const listed = new Set(properties);
    if (argument === false) {
      const allowed = properties.length === 0 ? 'no properties are allowed' : `allowed: ${properties.join(', ')}`;
      return (value, path, errors) => {
        if (!isPlainObject(value)) return;
        for (const key of Object.keys(value)) if (!listed.has(key)) errors.push({ path: child(path, key), message: `unknown property; ${allowed}` });
      };
    }
    const check = compile(argument, place.pointer, place.where);
    return (value, path, errors) => {
      if (!isPlainObject(value)) return;
      for (const key of Object.keys(value)) if (!listed.has(key)) check(value[key], child(path, key), errors);
    };
  },
  enum(argument, _, place) {
    if (!Array.isArray(argument) || argument.length === 0) throw place.fail('must be a non-empty array of the allowed values');
    const values = argument as unknown[];
    const list = values.map((item) => JSON.stringify(item)).join(', ');
    return (value, path, errors) => {
      if (!values.some((item) => jsonEqual(item, value))) errors.push({ path, message: `must be one of ${list}` });
    };
  },
  const(argument) {
    return (value, path, errors) => {
      if (!jsonEqual(argument, value)) errors.push({ path, message: `must be ${JSON.stringify(argument)}` });
    };
  },
  items(argument, _, place) {
    if (Array.isArray(argument)) throw place.fail('must be one schema for every item (a list of schemas, one per position, is not supported)');
    const check = compile(argument, place.pointer, place.where);
    return (value, path, errors) => {
      if (!Array.isArray(value)) return;
      for (let i = 0; i < value.length && errors.length <= MAX_ERRORS; i++) check(value[i], `${path}[${i}]`, errors);
    };
  },
  minimum: bound('>=', (value, limit) => value >= limit),
  maximum: bound('<=', (value, limit) => value <= limit),
  exclusiveMinimum: bound('>', (value, limit) => value > limit),
  exclusiveMaximum: bound('<', (value, limit) => value < limit),
  minLength: size('string', (n) => `must be at least ${n} character${n === 1 ? '' : 's'} long`, (value, n) => codePoints(value as string) >= n),
  maxLength: size('string', (n) => `must be at most ${n} character${n === 1 ? '' : 's'} long`, (value, n) => codePoints(value as string) <= n),
  minItems: size('array', (n) => `must have at least ${n} item${n === 1 ? '' : 's'}`, (value, n) => (value as unknown[]).length >= n),
  maxItems: size('array', (n) => `must have at most ${n} item${n === 1 ? '' : 's'}`, (value, n) => (value as unknown[]).length <= n),
  anyOf(argument, _, place) {
    if (!Array.isArray(argument) || argument.length === 0) throw place.fail('must be a non-empty array of schemas');
    const branches = argument.map((branch, i) => compile(branch, `${place.pointer}/${i}`, place.where));
    return (value, path, errors) => {
      let closest: SchemaError[] | undefined;
      for (const branch of branches) {
        const found: SchemaError[] = [];
        branch(value, path, found);
        if (found.length === 0) return;
        if (closest === undefined || found.length < closest.length) closest = found;
      }
      const hint = closest === undefined || closest.length === 0 ? '' : `; closest: ${formatSchemaErrors(closest.slice(0, 3))}`;
      errors.push({ path, message: `must match one of the ${branches.length} allowed forms${hint}` });
    };
  },
};

function compileType(argument: unknown, fail: (what: string) => TypeError): (value: unknown, path: string, errors: SchemaError[]) => boolean {
  const types = Array.isArray(argument) ? argument : [argument];
  if (types.length === 0 || !types.every((type) => typeof type === 'string' && TYPES.has(type))) {
    throw fail(`"type" must be one of ${[...TYPES].join(', ')}, or an array of them; got ${JSON.stringify(argument)}`);
  }
  const allowed = new Set(types as string[]);
  const expected = (types as string[]).map(article).join(' or ');
  return (value, path, errors) => {
    const type = typeOf(value);
    if (type !== undefined && (allowed.has(type) || (type === 'integer' && allowed.has('number')))) return true;
    errors.push({ path, message: `must be ${expected}, got ${kind(value)}` });
    return false;
  };
}

function bound(sign: string, ok: (value: number, limit: number) => boolean): Compiler {
  return (argument, _, place) => {
    if (typeof argument === 'boolean') throw place.fail(`must be a number; the true/false form of older drafts is not supported: write exclusiveMinimum: 0 for "> 0"`);
    if (typeof argument !== 'number' || !Number.isFinite(argument)) throw place.fail('must be a number');
    return (value, path, errors) => {
      if (typeof value === 'number' && !ok(value, argument)) errors.push({ path, message: `must be ${sign} ${argument}` });
    };
  };
}

function size(type: 'string' | 'array', message: (n: number) => string, ok: (value: unknown, n: number) => boolean): Compiler {
  return (argument, _, place) => {
    if (typeof argument !== 'number' || !Number.isSafeInteger(argument) || argument < 0) throw place.fail('must be a whole number >= 0');
    const text = message(argument);
    return (value, path, errors) => {
      if (typeOf(value) === type && !ok(value, argument)) errors.push({ path, message: text });
    };
  };
}

/** JSON Schema counts characters, not UTF-16 units: an emoji is one. */
function codePoints(text: string): number {
  let n = text.length;
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit >= 0xd800 && unit <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        n--;
        i++;
      }
    }
  }
  return n;
}

/** Equality of JSON values: key order does not matter, array order does. */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a)) return Array.isArray(b) && a.length === b.length && a.every((item, i) => jsonEqual(item, b[i]));
  if (Array.isArray(b)) return false;
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  return keys.every((key) => Object.hasOwn(b, key) && jsonEqual((a as Schema)[key], (b as Schema)[key]));
}

function typeOf(value: unknown): string | undefined {
  switch (typeof value) {
    case 'string':
      return 'string';
    case 'boolean':
      return 'boolean';
    case 'number':
      if (!Number.isFinite(value)) return undefined;
      return Number.isInteger(value) ? 'integer' : 'number';
    case 'object':
      return value === null ? 'null' : Array.isArray(value) ? 'array' : 'object';
    default:
      return undefined;
  }
}

function article(type: string): string {
  return type === 'null' ? 'null' : type === 'boolean' ? 'true or false' : `${/^[aeiou]/.test(type) ? 'an' : 'a'} ${type}`;
}

/** What a value is, for a message: never the value itself, which could be long. */
function kind(value: unknown): string {
  const type = typeOf(value);
  return type === undefined ? `a ${typeof value}` : type === 'number' ? 'a number with a fraction' : article(type);
}

function isPlainObject(value: unknown): value is Schema {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function child(path: string, key: string): string {
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

function escapePointer(key: string): string {
  return key.replaceAll('~', '~0').replaceAll('/', '~1');
}
