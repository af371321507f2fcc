import fc from 'fast-check';

/**
 * JSON request bodies for the fuzz test, built as text so that keys such as
 * `__proto__` and `\u` escapes arrive exactly as written: chat, invoke and
 * envelope bodies with odd members, any JSON value, deep nesting, truncated
 * JSON and garbage.
 */

export const BODY_LIMIT = 8 * 1024;
/**
 * Deepest JSON the fuzz sends: past the 4,000 levels where structuredClone
 * overflows the stack (a 500 before body.ts capped nesting; faults.test.ts
 * pins that down too), and as deep as an 8 KiB body allows.
 */
export const MAX_JSON_DEPTH = 4000;

const SPECIAL_KEYS = ['__proto__', 'constructor', 'prototype', 'toString', 'valueOf', 'toJSON', 'then', 'hasOwnProperty', 'message', 'method', 'params', 'payload', 'action', 'polluted'];
/** The same keys spelled with JSON escapes: JSON.parse decodes them into the dangerous names. */
const ESCAPED_KEYS = ['"\\u005f_proto__"', '"__proto\\u005f_"', '"\\u0063onstructor"', '"prototyp\\u0065"'];

const jsonKey = fc.oneof(
  { weight: 4, arbitrary: fc.string({ maxLength: 8 }).map((key) => JSON.stringify(key)) },
  { weight: 3, arbitrary: fc.constantFrom(...SPECIAL_KEYS).map((key) => JSON.stringify(key)) },
  { weight: 1, arbitrary: fc.constantFrom(...ESCAPED_KEYS) },
);

const jsonLeaf = fc.oneof(
  fc.constantFrom('null', 'true', 'false', '0', '-0', '1e308', '1e999', '-1e999', '""', '"\\u0000"', '"\\ud800"', '"\\n\\nevent: done\\ndata: [DONE]"'),
  fc.integer().map(String),
  fc.double({ noNaN: true, noDefaultInfinity: true }).map((n) => JSON.stringify(n)),
  fc.string({ unit: 'grapheme', maxLength: 20 }).map((s) => JSON.stringify(s)),
  // Any UTF-16 unit, lone surrogates included. (fast-check's 'binary' unit builds a 90 MiB table, costing a second and a noisy heap.)
  fc.string({ unit: fc.nat(0xffff).map((unit) => String.fromCharCode(unit)), maxLength: 10 }).map((s) => JSON.stringify(s)),
);

const { json } = fc.letrec<{ json: string; array: string; object: string }>((tie) => ({
  json: fc.oneof({ depthSize: 'small', maxDepth: 6 }, jsonLeaf, tie('array'), tie('object')),
  array: fc.array(tie('json'), { maxLength: 4 }).map((items) => `[${items.join(',')}]`),
  object: fc.array(fc.tuple(jsonKey, tie('json')), { maxLength: 4 }).map((pairs) => `{${pairs.map(([k, v]) => `${k}:${v}`).join(',')}}`),
}));

/** Extra members appended to an object body: `,"k":v...`. */
const extraMembers = fc.array(fc.tuple(jsonKey, json), { maxLength: 3 }).map((pairs) => pairs.map(([k, v]) => `,${k}:${v}`).join(''));

const deep = fc.integer({ min: 20, max: MAX_JSON_DEPTH }).chain((depth) =>
  fc.constantFrom('[', '{"a":').map((open) => open.repeat(depth) + (open === '[' ? ']' : '}').repeat(depth)),
);

const message = fc.oneof(
  { weight: 6, arbitrary: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 40 }).map((s) => JSON.stringify(s)) },
  { weight: 1, arbitrary: fc.constantFrom('"a\\nb\\r\\nc\\rd"', '"x\\n\\nevent: done\\ndata: [DONE]\\n\\nid: 1"', '"data: y"', '" spaced  words "') },
  { weight: 2, arbitrary: json },
);

const METHODS = ['increment', 'add', 'echo', 'merge', 'explode', 'constructor', '__proto__', 'toString', 'hasOwnProperty', 'setState', 'chat', 'invoke', 'notAnAction', ''];
const invokeMethod = fc.oneof(
  { weight: 5, arbitrary: fc.constantFrom(...METHODS).map((m) => JSON.stringify(m)) },
  { weight: 1, arbitrary: json },
);
const params = fc.oneof(
  { weight: 3, arbitrary: json },
  { weight: 1, arbitrary: deep },
  { weight: 1, arbitrary: fc.constantFrom('{"__proto__":{"polluted":1}}', '{"constructor":{"prototype":{"polluted":1}}}', '{"\\u005f_proto__":{"polluted":1}}', '[{"__proto__":{"polluted":1}}]', '{"by":2}', '[2,3]') },
);

const invokePayload = fc.tuple(invokeMethod, fc.option(params, { nil: undefined }), extraMembers).map(
  ([method, p, extra]) => `{"method":${method}${p === undefined ? '' : `,"params":${p}`}${extra}}`,
);

export const chatBody = fc.tuple(message, extraMembers).map(([m, extra]) => `{"message":${m}${extra}}`);
/** `POST /cancel`: no turn id, a made-up one, or one of another shape. */
export const cancelBody = fc.oneof(
  { weight: 3, arbitrary: fc.constant('{}') },
  { weight: 2, arbitrary: fc.uuid().map((id) => `{"turn_id":"${id}"}`) },
  { weight: 1, arbitrary: json.map((value) => `{"turn_id":${value}}`) },
);
export const invokeBody = fc.oneof({ weight: 4, arbitrary: invokePayload }, { weight: 1, arbitrary: invokePayload.map((payload) => `{"payload":${payload}}`) });
export const envelopeBody = fc
  .tuple(
    fc.oneof({ weight: 6, arbitrary: fc.constantFrom('"chat"', '"invoke"', '"state"', '"delete"', '"CHAT"') }, { weight: 1, arbitrary: json }),
    fc.option(message),
    fc.option(invokePayload),
    extraMembers,
  )
  .map(([action, m, payload, extra]) => `{"action":${action}${m === null ? '' : `,"message":${m}`}${payload === null ? '' : `,"payload":${payload}`}${extra}}`);

export const jsonBody = fc.oneof(
  { weight: 5, arbitrary: chatBody },
  { weight: 5, arbitrary: invokeBody },
  { weight: 3, arbitrary: envelopeBody },
  { weight: 2, arbitrary: json },
);

/** Text that is not (all) JSON: truncated JSON, stray bytes, a BOM, whitespace. */
export const garbageBody = fc.oneof(
  fc.tuple(jsonBody, fc.nat()).map(([text, cut]) => text.slice(0, text.length === 0 ? 0 : cut % text.length)),
  fc.string({ unit: 'grapheme', maxLength: 40 }),
  fc.constantFrom('', ' ', '\n', 'null', '"str"', '[]', '\ufeff{"message":"bom"}', '{"message":"x"}{"message":"y"}', '{"message":"x",}', "{'message':'x'}", 'NaN', '{"message":"\u0000"}'),
);

export const anyBody: fc.Arbitrary<Buffer | undefined> = fc.oneof(
  { weight: 2, arbitrary: fc.constant(undefined) },
  { weight: 10, arbitrary: jsonBody.map((text) => Buffer.from(text)) },
  { weight: 3, arbitrary: garbageBody.map((text) => Buffer.from(text)) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }).map((bytes) => Buffer.from(bytes)) },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 2048 }).map((extra) => Buffer.from(`{"message":"${'x'.repeat(BODY_LIMIT + extra)}"}`)) },
);
