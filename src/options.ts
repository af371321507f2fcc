import { describeValue } from './errors.ts';

/**
 * Checking option objects: AgentRouter's options, AgentServer's config and a
 * config file's keys. A wrong type or an unknown key is a TypeError naming
 * it when the object is made, never a surprise at the first request: a
 * misspelt `authorise` would otherwise leave a router open, and a
 * `bodyLimit: '1mb'` would leave it unbounded.
 */

/** Node timers overflow above 2^31 - 1 ms (and then fire at once), so no duration may exceed it. */
const MAX_TIMER = 2_147_483;

/** How an option's value is checked. */
export type OptionKind =
  | 'seconds' | 'idleSeconds' | 'limitSeconds' | 'positiveSeconds' | 'count' | 'limit' | 'positiveCount' | 'boolean' | 'function'
  | 'object' | 'logger' | 'strings' | 'cors' | 'string' | 'path' | 'port' | 'origins' | 'hosts';

/**
 * Checks every key of `values` against `kinds`: unknown keys and values of
 * the wrong kind throw. `name` maps a key to the name the user wrote (its
 * snake_case spelling in a config file); `hint` adds to an unknown key's
 * message (`; did you mean authorize?` by default).
 */
export function checkOptions(
  values: object,
  kinds: Readonly<Record<string, OptionKind>>,
  where: string,
  name: (key: string) => string = (key) => key,
  hint: (key: string) => string = (key) => nearest(key, Object.keys(kinds)),
): void {
  if (typeof values !== 'object' || values === null || Array.isArray(values)) {
    throw new TypeError(`${where}: options must be an object, got ${describeValue(values)}`);
  }
  for (const [key, value] of Object.entries(values)) {
    // Own keys only: `toString` (or `constructor`) would otherwise find Object.prototype's and be taken for a kind.
    const kind = Object.hasOwn(kinds, key) ? kinds[key] : undefined;
    if (kind === undefined) throw new TypeError(`${where}: unknown option ${JSON.stringify(key)}${hint(key)}`);
    if (value !== undefined) checkOption(value, kind, `${where}: ${name(key)}`);
  }
}

/** Throws a TypeError unless `value` is undefined or one of `choices`: "<label> must be 'a', 'b' or 'c', got ...". */
export function checkChoice(value: unknown, choices: readonly string[], label: string): void {
  if (value === undefined || choices.includes(value as string)) return;
  const listed = choices.map((choice) => `'${choice}'`);
  throw new TypeError(`${label} must be ${listed.slice(0, -1).join(', ')} or ${listed.at(-1)}, got ${JSON.stringify(value)}`);
}

export function checkOption(value: unknown, kind: OptionKind, label: string): void {
  const ok = {
    seconds: () => typeof value === 'number' && value >= 0 && value <= MAX_TIMER,
    idleSeconds: () => typeof value === 'number' && value >= 0 && (value <= MAX_TIMER || value === Infinity),
    limitSeconds: () => typeof value === 'number' && value >= 0 && (value <= MAX_TIMER || value === Infinity), // idleSeconds, said otherwise
    positiveSeconds: () => typeof value === 'number' && value > 0 && value <= MAX_TIMER,
    count: () => typeof value === 'number' && Number.isSafeInteger(value) && value >= 0,
    limit: () => typeof value === 'number' && (Number.isSafeInteger(value) || value === Infinity) && value >= 0,
    positiveCount: () => typeof value === 'number' && Number.isSafeInteger(value) && value >= 1,
    port: () => typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= 65535,
    boolean: () => typeof value === 'boolean',
    function: () => typeof value === 'function',
    object: () => typeof value === 'object' && value !== null,
    // Checked here, not at the first failure: a logger without `error` would lose that failure's report.
    logger: () => typeof value === 'object' && value !== null && typeof (value as { error?: unknown }).error === 'function',
    strings: () => Array.isArray(value) && value.every((item) => typeof item === 'string'),
    cors: () => value === '*' || Array.isArray(value) || (typeof value === 'object' && value !== null),
    string: () => typeof value === 'string' && value !== '',
    path: () => typeof value === 'string',
    origins: () => value === '*' || (Array.isArray(value) && value.every((origin) => typeof origin === 'string')),
    // Names (a leading dot for a domain and its subdomains) or IPv6 addresses in brackets: no port, no `*`.
    hosts: () => value === true || (Array.isArray(value) && value.every((host) => typeof host === 'string' && /^\.?[a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.?$|^\[[0-9a-f:.]+\]$/i.test(host))),
  }[kind]();
  if (ok) return;
  const expected = {
    seconds: `a number of seconds from 0 to ${MAX_TIMER}`,
    // Infinity is taken too, but a config file (JSON) cannot write it: 0 is the way offered.
    idleSeconds: `a number of seconds from 0 to ${MAX_TIMER} (0: never drop)`,
    limitSeconds: `a number of seconds from 0 to ${MAX_TIMER} (0: no limit)`,
    positiveSeconds: `a number of seconds above 0, at most ${MAX_TIMER}`,
    count: 'a whole number >= 0',
    limit: 'a whole number >= 0',
    positiveCount: 'a whole number >= 1',
    port: 'a port number from 0 to 65535',
    boolean: 'true or false',
    function: 'a function',
    object: 'an object',
    logger: 'an object with an error(message, error) method, such as console or a pino logger',
    strings: 'a list of strings, e.g. ["agents"]',
    cors: 'a list of origins such as ["https://app.example.com"], \'*\', or an object such as { origins: [...], credentials: true }',
    string: 'a non-empty string',
    path: 'a string such as "/agents"',
    origins: '"*" or a list of origins such as ["https://app.example.com"]',
    hosts: 'true (any) or a list of host names without port, such as ["agents.example.com", ".example.com"] (a leading dot: that name and every name under it; no * wildcards)',
  }[kind];
  throw new TypeError(`${label} must be ${expected}, got ${describeValue(value)}`);
}

/**
 * Throws a TypeError for a key of `values` that is not a key of `known`, for
 * options whose values their owner checks itself: a misspelt `sytem` would
 * otherwise be dropped without a word, and the agent run without its prompt.
 * `known` is typed by its owner as every option mapped to true, so a new
 * option cannot be forgotten there.
 */
export function checkKnownOptions(values: object, known: Readonly<Record<string, true>>, where: string): void {
  for (const [key, value] of Object.entries(values)) {
    // Undefined is no setting (an options object built from the environment, a spread), as every option's default is.
    if (value !== undefined && !Object.hasOwn(known, key)) throw new TypeError(`${where}: unknown option ${JSON.stringify(key)}${nearest(key, Object.keys(known))}`);
  }
}

/**
 * `; did you mean X?` for the known key fewest edits away from `key` (case
 * and `_` aside), within two edits (one for keys of four letters or fewer,
 * so `port` does not become `cors`); else the known keys.
 */
export function nearest(key: string, known: readonly string[]): string {
  const plain = (text: string): string => text.toLowerCase().replaceAll('_', '');
  const most = plain(key).length <= 4 ? 1 : 2;
  let best: { name: string; edits: number } | undefined;
  for (const name of known) {
    const edits = editDistance(plain(key), plain(name));
    if (edits <= most && (best === undefined || edits < best.edits)) best = { name, edits };
  }
  // `now` (a clock for tests) is accepted but internal: not one to offer.
  return best === undefined ? `; known options: ${known.filter((name) => name !== 'now').join(', ')}` : `; did you mean ${best.name}?`;
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min((previous[j] as number) + 1, (current[j - 1] as number) + 1, (previous[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length] as number;
}
