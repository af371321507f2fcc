/**
 * Compiling registry patterns. Every pattern matches the whole id (anchored
 * at both ends, simple or not: the spec's original anchored only plain words
 * and so let `worker-[0-9]+` match `worker-1/../admin`).
 */
export function compilePattern(pattern: string | RegExp, allowBacktracking: boolean): RegExp {
  const source = typeof pattern === 'string' ? pattern : pattern.source;
  // g and y make test() stateful; m would let ^ and $ match inside the id. A string's `.` matches
  // any character (s), U+2028 and U+2029 included, so `.*` is the catch-all it reads as.
  const flags = typeof pattern === 'string' ? 's' : pattern.flags.replace(/[gym]/g, '');
  let compiled: RegExp;
  try {
    compiled = new RegExp(`^(?:${source})$`, flags);
  } catch (error) {
    throw new TypeError(`AgentRegistry.register: pattern ${String(pattern)} does not compile: ${(error as Error).message}`, {
      cause: error,
    });
  }
  if (!allowBacktracking && canBacktrackBadly(source)) {
    throw new TypeError(
      `AgentRegistry.register: pattern ${String(pattern)} repeats a group that can match the same text more than one way ` +
        '(a quantifier inside it, or alternatives that may overlap), which can backtrack catastrophically on hostile ids; ' +
        'rewrite it (e.g. (a+)+ as a+, (a|ab)* as [ab]*), or pass { allowBacktracking: true } if you have checked it',
    );
  }
  return compiled;
}

/**
 * True when a repeated group can match the same text in more than one way,
 * the shape of exponential backtracking: a quantifier inside a quantified
 * group (`(a+)+`, `(\d*x)*`, `(?:a{2,})+`), or alternatives inside one that
 * may overlap (`(a|a)*`, `(\w|\d)+`, `((a|ab)c)*`). Alternatives count as
 * safe only when each is a plain literal and none is a prefix of another
 * (`(foo|bar|baz)+`); anything else is refused, conservatively.
 */
export function canBacktrackBadly(source: string): boolean {
  // Per open group: does it contain a quantifier or an ambiguous alternation, where it started, and its top-level `|`s.
  const groups: Array<{ risky: boolean; start: number; bars: number[] }> = [];
  let inClass = false;
  for (let i = 0; i < source.length; i++) {
    const char = source[i];
    if (char === '\\') {
      i++;
      continue;
    }
    if (inClass) {
      if (char === ']') inClass = false;
      continue;
    }
    const group = groups[groups.length - 1];
    if (char === '[') inClass = true;
    else if (char === '(') groups.push({ risky: false, start: i + 1, bars: [] });
    else if (char === '|') group?.bars.push(i);
    else if (char === ')') {
      const closed = groups.pop();
      if (closed === undefined) continue;
      const risky = closed.risky || (closed.bars.length > 0 && !distinctLiterals(alternatives(source, closed.start, closed.bars, i)));
      const quantified = isQuantifier(source, i + 1);
      if (quantified && risky) return true;
      const parent = groups[groups.length - 1];
      if (parent !== undefined && (quantified || risky)) parent.risky = true;
    } else if (group !== undefined && isQuantifier(source, i)) {
      group.risky = true;
    }
  }
  return false;
}

function alternatives(source: string, start: number, bars: number[], end: number): string[] {
  const body = source.slice(start, end);
  // A non-capturing or named group's `?:` / `?<name>` is not part of the first alternative.
  const offset = /^\?(?::|<[A-Za-z_$][\w$]*>|=|!|<=|<!)/.exec(body)?.[0].length ?? 0;
  const cuts = [start + offset, ...bars.map((bar) => bar + 1)];
  return cuts.map((from, index) => source.slice(from, (bars[index] ?? end)));
}

/**
 * Plain literals (letters, digits, `_`, `-`), none a prefix of another, case
 * aside: then at most one alternative can match at any position, so the
 * repeated group matches a text one way only.
 */
function distinctLiterals(branches: string[]): boolean {
  if (!branches.every((branch) => /^[A-Za-z0-9_-]+$/.test(branch))) return false;
  const lower = branches.map((branch) => branch.toLowerCase());
  return lower.every((branch, i) => lower.every((other, j) => i === j || !other.startsWith(branch)));
}

/** `*`, `+`, or `{n,}` / `{n,m}` with m > 1 at `index` (`?` and `{1}` cannot repeat). */
function isQuantifier(source: string, index: number): boolean {
  const char = source[index];
  if (char === '*' || char === '+') return true;
  if (char !== '{') return false;
  const match = /^\{(\d+)(,(\d*))?\}/.exec(source.slice(index));
  if (match === null) return false;
  if (match[2] === undefined) return Number(match[1]) > 1;
  return match[3] === '' || Number(match[3]) > 1;
}
