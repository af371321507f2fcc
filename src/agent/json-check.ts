/**
 * Throws a TypeError when `value` is not JSON as it is: what `JSON.stringify`
 * refuses (a BigInt, a cycle) and what it would silently change (NaN or
 * Infinity to null, a function or symbol dropped, a Map or Set to `{}`).
 * State and action results go over the wire and into storage as JSON; caught
 * here, before the turn commits, a bad value fails its turn (changing
 * nothing) instead of being half-stored or breaking every later read.
 */
export function assertJson(value: unknown, what: string): void {
  let problem: string | undefined;
  try {
    JSON.stringify(value, (key, inner: unknown) => {
      if (problem === undefined) problem = problemOf(inner, key);
      return problem === undefined ? inner : undefined;
    });
  } catch {
    problem ??= 'a circular reference';
  }
  if (problem !== undefined) throw new TypeError(`${what} is not JSON: it holds ${problem}`);
}

function problemOf(value: unknown, key: string): string | undefined {
  const at = key === '' ? '' : ` (key ${JSON.stringify(key.slice(0, 64))})`;
  switch (typeof value) {
    case 'number':
      return Number.isFinite(value) ? undefined : `${String(value)}${at}`;
    case 'bigint':
      return `a BigInt${at}`;
    case 'function':
    case 'symbol':
      return `a ${typeof value}${at}`;
    case 'object':
      return value instanceof Map || value instanceof Set ? `a ${value.constructor.name}${at}` : undefined;
    default:
      return undefined;
  }
}
