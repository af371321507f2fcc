import assert from 'node:assert/strict';
import test from 'node:test';
import { Ajv2020 } from 'ajv/dist/2020.js';
import fc from 'fast-check';
import { compileSchema, formatSchemaErrors, MAX_ERRORS } from '../../src/lib/json-schema.ts';

const weather = compileSchema(
  {
    type: 'object',
    description: 'Get the weather',
    properties: {
      city: { type: 'string', minLength: 1, description: 'e.g. Paris' },
      units: { enum: ['c', 'f'], default: 'c' },
      days: { type: 'integer', minimum: 1, maximum: 7 },
      hours: { type: 'array', items: { type: 'integer', exclusiveMinimum: -1, exclusiveMaximum: 24 }, maxItems: 3 },
      'bad key': { type: ['string', 'null'] },
    },
    required: ['city'],
    additionalProperties: false,
  },
  'get_weather.parameters',
);

test('a matching value has no errors', () => {
  assert.deepEqual(weather.validate({ city: 'Paris' }), []);
  assert.deepEqual(weather.validate({ city: 'Paris', units: 'f', days: 7, hours: [0, 23], 'bad key': null }), []);
  assert.deepEqual(weather.validate({ city: 'Paris', days: 2.0 }), [], '2.0 is an integer, as JSON Schema says');
});

test('errors name the place and say what to do, in words a model can act on', () => {
  assert.equal(formatSchemaErrors(weather.validate({})), 'arguments.city: required');
  assert.equal(formatSchemaErrors(weather.validate({ city: 'Paris', units: 'k' })), 'arguments.units: must be one of "c", "f"');
  assert.equal(formatSchemaErrors(weather.validate({ city: 3 })), 'arguments.city: must be a string, got an integer');
  assert.equal(formatSchemaErrors(weather.validate({ city: '' })), 'arguments.city: must be at least 1 character long');
  assert.equal(formatSchemaErrors(weather.validate({ city: 'x', days: 1.5 })), 'arguments.days: must be an integer, got a number with a fraction');
  assert.equal(formatSchemaErrors(weather.validate({ city: 'x', days: 8 })), 'arguments.days: must be <= 7');
  assert.equal(formatSchemaErrors(weather.validate({ city: 'x', hours: [24] })), 'arguments.hours[0]: must be < 24');
  assert.equal(formatSchemaErrors(weather.validate({ city: 'x', hours: [1, 2, 3, 4] })), 'arguments.hours: must have at most 3 items');
  assert.equal(formatSchemaErrors(weather.validate({ city: 'x', 'bad key': 1 })), 'arguments["bad key"]: must be a string or null, got an integer');
  assert.equal(formatSchemaErrors(weather.validate({ city: 'x', country: 'FR' })), 'arguments.country: unknown property; allowed: city, units, days, hours, bad key');
  assert.equal(formatSchemaErrors(weather.validate([])), 'arguments: must be an object, got an array');
  assert.equal(formatSchemaErrors(weather.validate({ city: 'x' }, 'input')), '');
  assert.equal(formatSchemaErrors(weather.validate({}, 'input')), 'input.city: required');
});

test('anyOf, const, boolean schemas and additionalProperties as a schema', () => {
  const schema = compileSchema(
    {
      type: 'object',
      properties: { id: { anyOf: [{ type: 'string', maxLength: 2 }, { type: 'integer', minimum: 0 }] }, kind: { const: 'x' }, never: false },
      additionalProperties: { type: 'boolean' },
    },
    'test',
  );
  assert.deepEqual(schema.validate({ id: 'ab', kind: 'x', extra: true }), []);
  assert.deepEqual(schema.validate({ id: 3 }), []);
  assert.deepEqual(schema.validate({ kind: 'y' }), [{ path: 'arguments.kind', message: 'must be "x"' }]);
  assert.deepEqual(schema.validate({ never: 1 }), [{ path: 'arguments.never', message: 'is not allowed here' }]);
  assert.deepEqual(schema.validate({ extra: 1 }), [{ path: 'arguments.extra', message: 'must be true or false, got an integer' }]);
  assert.deepEqual(schema.validate({ id: -1 }), [{ path: 'arguments.id', message: 'must match one of the 2 allowed forms; closest: arguments.id: must be a string, got an integer' }]);
});

test('strings are measured in characters, not UTF-16 units', () => {
  const schema = compileSchema({ type: 'string', maxLength: 2, minLength: 2 }, 'test');
  assert.deepEqual(schema.validate('👋é'), []);
  assert.equal(schema.validate('👋').length, 1);
});

test('errors are capped, so a huge wrong array gives a short answer', () => {
  const schema = compileSchema({ type: 'array', items: { type: 'string' } }, 'test');
  assert.equal(schema.validate(Array.from({ length: 10_000 }, (_, i) => i)).length, MAX_ERRORS);
});

test('keys such as __proto__ and constructor are properties like any other', () => {
  const schema = compileSchema(JSON.parse('{"type":"object","properties":{"__proto__":{"type":"string"}},"required":["constructor"]}'), 'test');
  assert.deepEqual(schema.validate(JSON.parse('{"__proto__": 1, "constructor": 2}')), [{ path: 'arguments.__proto__', message: 'must be a string, got an integer' }]);
  assert.deepEqual(schema.validate({}), [{ path: 'arguments.constructor', message: 'required' }]);
});

test('a schema with an unknown or misused keyword is refused at definition, naming the keyword, its place and the fix', () => {
  const refused: Array<[unknown, RegExp]> = [
    [{ type: 'object', properties: { city: { type: 'string', pattern: '^a' } } }, /^TypeError: tool\.parameters: unknown keyword "pattern" .*; remove it, or check that rule in the tool itself at \/properties\/city$/],
    [{ oneOf: [] }, /unknown keyword "oneOf" .*; use anyOf at the schema root$/],
    [{ $ref: '#/$defs/x' }, /unknown keyword "\$ref".*write the referenced schema in place/],
    [{ type: 'string', nullable: true }, /use type: \["string", "null"\]/],
    [{ type: 'text' }, /"type" must be one of null, boolean, object, array, number, integer, string, or an array of them; got "text" at the schema root/],
    [{ type: [] }, /"type" must be one of/],
    [{ required: 'city' }, /"required" must be an array of property names/],
    [{ enum: [] }, /"enum" must be a non-empty array/],
    [{ items: [{ type: 'string' }] }, /"items" must be one schema for every item/],
    [{ minLength: -1 }, /"minLength" must be a whole number >= 0/],
    [{ exclusiveMinimum: true }, /"exclusiveMinimum" must be a number; the true\/false form/],
    [{ properties: { a: 'string' } }, /a schema must be an object \(or true\/false\), got a string at \/properties\/a$/],
    [{ anyOf: [{ type: 'string' }, { format: 'date', minimum: 'x' }] }, /"minimum" must be a number at \/anyOf\/1$/],
    [{ items: { properties: { 'a/b': { bad: 1 } } } }, /unknown keyword "bad".* at \/items\/properties\/a~1b$/],
    ['object', /a schema must be an object/],
  ];
  for (const [schema, message] of refused) {
    assert.throws(() => compileSchema(schema, 'tool.parameters'), (error: unknown) => error instanceof TypeError && message.test(String(error)), JSON.stringify(schema));
  }
});

// Property-based: on schemas and values drawn from the subset, this validator and ajv agree on valid / invalid.

const KEYS = ['a', 'b', 'c'] as const;
const STRINGS = ['', 'a', 'ab', 'é👋', 'abc'] as const;
const NUMBERS = [-2, -1, 0, 0.5, 1, 1.5, 2, 3] as const;

const jsonLeaf = fc.oneof(fc.constantFrom(...STRINGS), fc.constantFrom(...NUMBERS), fc.boolean(), fc.constant(null));
const { value: valueArb } = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    jsonLeaf,
    fc.array(tie('value'), { maxLength: 3 }),
    fc.dictionary(fc.constantFrom(...KEYS), tie('value'), { maxKeys: 3, noNullPrototype: true }),
  ),
}));

const typeName = fc.constantFrom('null', 'boolean', 'object', 'array', 'number', 'integer', 'string');
const count = fc.integer({ min: 0, max: 3 });
const { schema: schemaArb } = fc.letrec<{ schema: unknown }>((tie) => ({
  schema: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.boolean(),
    fc.record(
      {
        type: fc.oneof(typeName, fc.uniqueArray(typeName, { minLength: 1, maxLength: 3 })),
        properties: fc.dictionary(fc.constantFrom(...KEYS), tie('schema'), { maxKeys: 3, noNullPrototype: true }),
        required: fc.uniqueArray(fc.constantFrom(...KEYS), { maxLength: 3 }),
        additionalProperties: fc.oneof(fc.boolean(), tie('schema')),
        enum: fc.array(valueArb, { minLength: 1, maxLength: 3 }),
        const: valueArb,
        items: tie('schema'),
        minimum: fc.constantFrom(...NUMBERS),
        maximum: fc.constantFrom(...NUMBERS),
        exclusiveMinimum: fc.constantFrom(...NUMBERS),
        exclusiveMaximum: fc.constantFrom(...NUMBERS),
        minLength: count,
        maxLength: count,
        minItems: count,
        maxItems: count,
        anyOf: fc.array(tie('schema'), { minLength: 1, maxLength: 3 }),
        description: fc.constant('annotation'),
      },
      { requiredKeys: [] },
    ),
  ),
}));

const seed = process.env['FC_SEED'] !== undefined ? Number(process.env['FC_SEED']) : (Date.now() ^ Math.floor(Math.random() * 0x7fffffff)) | 0;

test(`agrees with ajv on generated schemas and values (seed ${seed}; replay with FC_SEED=${seed})`, () => {
  console.log(`json-schema property seed ${seed}; replay with FC_SEED=${seed} node scripts/test.mjs --tsx test/unit/json-schema.test.ts`);
  const ajv = new Ajv2020({ strict: false, allErrors: false, validateSchema: false });
  fc.assert(
    fc.property(schemaArb, fc.array(valueArb, { minLength: 1, maxLength: 8 }), (schema, values) => {
      const ours = compileSchema(schema, 'generated');
      const theirs = ajv.compile(schema as object);
      for (const value of values) {
        const errors = ours.validate(value);
        assert.equal(errors.length === 0, theirs(value), `schema ${JSON.stringify(schema)}\nvalue ${JSON.stringify(value)}\nours: ${formatSchemaErrors(errors)}`);
      }
    }),
    { seed, numRuns: 1500 },
  );
});

test('values made to match a schema match it, and the schema is compiled once for many values', () => {
  const schema = compileSchema({ type: 'object', properties: { n: { type: 'integer', minimum: 0 }, tags: { type: 'array', items: { enum: ['x', 'y'] } } }, required: ['n'] }, 'test');
  fc.assert(
    fc.property(fc.record({ n: fc.nat(), tags: fc.array(fc.constantFrom('x', 'y')) }, { requiredKeys: ['n'] }), (value) => {
      assert.deepEqual(schema.validate(value), []);
    }),
    { seed, numRuns: 200 },
  );
});
