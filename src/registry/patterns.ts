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
  if (!allowBacktracking && canBacktrackBadly(source, flags)) {
    throw new TypeError(
      `AgentRegistry.register: pattern ${String(pattern)} can backtrack catastrophically on hostile ids: it repeats a group ` +
        'that can match the same text more than one way (a quantifier inside it, or alternatives that may overlap), or has ' +
        'three or more unbounded repeats in a row that can give up text to each other (.*-.*-.*), whose cost grows with a power of the ' +
        'id\'s length; rewrite it (e.g. (a+)+ as a+, (a|ab)* as [ab]*, .*-.*-.* as [^-]*-[^-]*-.*), or pass { allowBacktracking: true } if you have checked it',
    );
  }
  return compiled;
}

/**
 * True when matching can cost exponential or high polynomial time:
 * - a repeated group that can match the same text in more than one way: a
 *   quantifier inside a quantified group (`(a+)+`, `(\d*x)*`, `(?:a?a?)+`,
 *   `(?:a{2,})+`), or alternatives inside one that may overlap (`(a|a)*`,
 *   `(\w|\d)+`, `((a|ab)c)*`). Alternatives count as safe only when each is
 *   a plain literal and none is a prefix of another (`(foo|bar|baz)+`);
 *   anything else is refused, conservatively.
 * - three or more unbounded repeats in a row, each able to give up text to
 *   the next (`.*-.*-.*`, `\d+\d+\d+`; see chainOfThree): a failing match
 *   tries every way to split the id between them, about n^3 steps for three
 *   (25 ms at 256 characters), n^4 for four (seconds). Two cost n^2, under
 *   a millisecond.
 */
export function canBacktrackBadly(source: string, flags = ''): boolean {
  // Per open group: does it contain a quantifier or an ambiguous alternation, where it started, and its top-level `|`s.
  const groups: Array<{ risky: boolean; start: number; bars: number[] }> = [];
  const repeated: Repeat[] = [];
  let inClass = false;
  let classStart = -1;
  /** Where the last atom began: a repeat after it applies to source.slice(atomStart, i); a group if atomIsGroup. */
  let atomStart = -1;
  let atomIsGroup = false;
  for (let i = 0; i < source.length; i++) {
    const char = source[i];
    if (char === '\\') {
      if (!inClass) [atomStart, atomIsGroup] = [i, false];
      i++;
      continue;
    }
    if (inClass) {
      if (char === ']') {
        inClass = false;
        [atomStart, atomIsGroup] = [classStart, false];
      }
      continue;
    }
    const group = groups[groups.length - 1];
    const quantifier = quantifierAt(source, i);
    if (char === '[') {
      inClass = true;
      classStart = i;
    } else if (char === '(') {
      groups.push({ risky: false, start: i + 1, bars: [] });
      // `(?:`, `(?<name>`: the `?` is syntax, not a quantifier.
      if (source[i + 1] === '?') i++;
    } else if (char === '|') group?.bars.push(i);
    else if (char === ')') {
      const closed = groups.pop();
      if (closed === undefined) continue;
      // The group's `(`, for the text between repeats (below); `start` is just past it.
      [atomStart, atomIsGroup] = [closed.start - 1, true];
      const risky = closed.risky || (closed.bars.length > 0 && !distinctLiterals(alternatives(source, closed.start, closed.bars, i)));
      const repeats = quantifierAt(source, i + 1);
      if (repeats === 'repeats' && risky) return true;
      const parent = groups[groups.length - 1];
      if (parent !== undefined && (repeats !== undefined || risky)) parent.risky = true;
    } else if (quantifier !== undefined) {
      if (group !== undefined) group.risky = true;
      const end = quantifierEnd(source, i);
      if (quantifier === 'repeats' && unbounded(source, i) && atomStart >= 0) {
        repeated.push({ atom: atomIsGroup ? undefined : source.slice(atomStart, i), start: atomStart, end: end + 1 });
      }
      i = end;
    } else {
      [atomStart, atomIsGroup] = [i, false];
    }
  }
  return chainOfThree(repeated, source, flags);
}

/** An unbounded repeat: its atom (undefined for a group, taken to match anything) and where it starts and ends in the source. */
interface Repeat {
  atom: string | undefined;
  start: number;
  end: number;
}

/** `'repeats'` for `*`, `+`, `{n,}` and `{n,m}` with m > 1; `'optional'` for `?` and `{0,1}`; else undefined. */
function quantifierAt(source: string, index: number): 'repeats' | 'optional' | undefined {
  const char = source[index];
  if (char === '*' || char === '+') return 'repeats';
  if (char === '?') return 'optional';
  if (char !== '{') return undefined;
  const match = /^\{(\d+)(,(\d*))?\}/.exec(source.slice(index));
  if (match === null) return undefined;
  const most = match[2] === undefined ? Number(match[1]) : match[3] === '' ? Infinity : Number(match[3]);
  return most > 1 ? 'repeats' : 'optional';
}

/** `*`, `+`, `{n,}`, or `{n,m}` with a wide range (at least 32 more): a repeat whose share of the id is not bounded by the pattern. */
function unbounded(source: string, index: number): boolean {
  const match = /^\{(\d+)(,(\d*))?\}/.exec(source.slice(index));
  if (match === null) return true;
  return match[2] !== undefined && (match[3] === '' || Number(match[3]) - Number(match[1]) >= 32);
}

/** The last index of the quantifier at `index`, with its lazy or possessive-looking `?` after it. */
function quantifierEnd(source: string, index: number): number {
  let end = source[index] === '{' ? source.indexOf('}', index) : index;
  if (source[end + 1] === '?') end++;
  return end;
}

/** Characters that stand for the rest when checking what an atom matches: ASCII, and a few beyond it. */
const PROBES = [...Array.from({ length: 128 }, (_, code) => String.fromCharCode(code)), '\u00e9', '\u00a0', '\u2028', '\u4e2d', '\u{1f600}'];

/**
 * True when three repeats follow one another, each able to give up text to
 * the next: it can match what stands between them, and the two share a
 * character (`.*-.*-.*`, `\d+\d+\d+`). A failing id then tries every way to
 * split itself between them. A repeat that cannot cross its separator
 * (`[^-]*-[^-]*-.*`, `[a-z]+-[0-9]+-[a-z]+`) ends the chain: its extent is
 * forced. What stands between is read conservatively: anything but plain
 * characters and group brackets counts as crossable, a `|` as a break.
 */
function chainOfThree(repeats: Repeat[], source: string, flags: string): boolean {
  const matchers = repeats.map((repeat) => matcherOf(repeat.atom, flags));
  let chain = 1;
  for (let i = 1; i < repeats.length; i++) {
    const before = matchers[i - 1] as Matcher;
    const gap = source.slice((repeats[i - 1] as Repeat).end, (repeats[i] as Repeat).start).replace(GROUP_SYNTAX, '');
    const crossable = !gap.includes('|') && (/[\\[\].?*+{}^$]/.test(gap) || [...gap].every(before));
    const linked = crossable && PROBES.some((probe) => before(probe) && (matchers[i] as Matcher)(probe));
    chain = linked ? chain + 1 : 1;
    if (chain >= 3) return true;
  }
  return false;
}

type Matcher = (char: string) => boolean;

/** Group brackets between two repeats: they match nothing themselves. */
const GROUP_SYNTAX = /\(\?(?::|<[A-Za-z_$][\w$]*>)|[()]/g;

function matcherOf(atom: string | undefined, flags: string): Matcher {
  if (atom === undefined) return () => true;
  try {
    const regex = new RegExp(`^(?:${atom})$`, flags.replace(/[gy]/g, ''));
    return (char) => regex.test(char);
  } catch {
    return () => true;
  }
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
