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
        'repeats in a row that can give up text to each other (.*-.*-.*), whose cost grows with a power of the ' +
        'id\'s length; rewrite it (e.g. (a+)+ as a+, (a|ab)* as [ab]*, .*-.*-.* as [^-]*-[^-]*-.*), or pass { allowBacktracking: true } if you have checked it',
    );
  }
  return compiled;
}

/**
 * True when matching can cost exponential or high polynomial time:
 * - a repeated group that can match the same text in more than one way: a
 *   repeat inside a repeated group (`(a+)+`, `(\d*x)*`, `(?:a{2,})+`), an
 *   optional part that overlaps another part of it, or a body that can be
 *   empty (`(?:a?a?)+`; not `(?:-?[a-z0-9])*`, whose `-` is no digit), or
 *   alternatives inside one that may overlap (`(a|a)*`, `(\w|\d)+`,
 *   `((a|ab)c)*`). Alternatives count as safe only when each is a plain
 *   literal and none is a prefix of another (`(foo|bar|baz)+`); anything
 *   else is refused, conservatively.
 * - repeats in a row, each able to give up text to the next, whose ways to
 *   split an id multiply past {@link MAX_SPLITS} (`.*-.*-.*`, `\d+\d+\d+`,
 *   `.{0,31}` six times); see {@link tooManySplits}.
 */
export function canBacktrackBadly(source: string, flags = ''): boolean {
  const groups: Group[] = [];
  const repeats: Repeat[] = [];
  /** The atom just read: a quantifier after it applies to it. */
  let last: Atom | undefined;
  const read = (start: number, end: number, text: string | undefined): void => {
    last = { start, end, text, optional: false };
    groups[groups.length - 1]?.atoms.push(last);
  };
  for (let i = 0; i < source.length; i++) {
    const char = source[i] as string;
    const group = groups[groups.length - 1];
    if (char === '\\') {
      read(i, i + 2, source.slice(i, i + 2));
      i++;
    } else if (char === '[') {
      const end = classEnd(source, i);
      read(i, end, source.slice(i, end));
      i = end - 1;
    } else if (char === '(') {
      groups.push({ risky: false, start: i + 1, bars: [], atoms: [] });
      last = undefined;
      // `(?:`, `(?<name>`, lookarounds: syntax, not atoms.
      i += groupSyntaxLength(source, i + 1);
    } else if (char === '|') {
      group?.bars.push(i);
      last = undefined;
    } else if (char === ')') {
      const closed = groups.pop();
      if (closed === undefined) continue;
      const risky = closed.risky || ambiguousOptional(closed.atoms, flags)
        || (closed.bars.length > 0 && !distinctLiterals(alternatives(source, closed.start, closed.bars, i)));
      const quantifier = quantifierAt(source, i + 1);
      if (quantifier === 'repeats' && risky) return true;
      const parent = groups[groups.length - 1];
      if (parent !== undefined && (quantifier === 'repeats' || risky)) parent.risky = true;
      // The group is one atom of its parent, taken to match anything.
      read(closed.start - 1, i + 1, undefined);
    } else if (quantifierAt(source, i) !== undefined && last !== undefined) {
      const end = quantifierEnd(source, i);
      const [least, most] = boundsAt(source, i);
      last.optional = least === 0;
      if (most > 1 && group !== undefined) group.risky = true;
      // An optional group (`(...)?`) is no repeat of its own: the repeats inside it stay in the row.
      const optionalGroup = last.text === undefined && most === 1;
      if (most > least && !optionalGroup) {
        repeats.push({ matches: matcherOf(last.text, flags), start: last.start, end: end + 1, span: Math.min(most - least + 1, MAX_ID), optional: least === 0 });
      }
      i = end;
      last = undefined;
    } else {
      read(i, i + 1, char);
    }
  }
  return tooManySplits(repeats, source, flags);
}

/** An open group: does it hold something that makes repeating it ambiguous, where its body starts, its `|`s, its atoms. */
interface Group {
  risky: boolean;
  start: number;
  bars: number[];
  atoms: Atom[];
}

/** One character's worth of pattern (`a`, `\d`, `[a-z]`, `.`), or a group (`text` undefined: anything). */
interface Atom {
  start: number;
  end: number;
  text: string | undefined;
  optional: boolean;
}

/** A repeated atom: what it matches, where it stands in the source, how many lengths it can take (at most MAX_ID), whether none. */
interface Repeat {
  matches: Matcher;
  start: number;
  end: number;
  span: number;
  optional: boolean;
}

type Matcher = (char: string) => boolean;

/** Longer than any id the router lets through (maxIdLength 256), so a repeat's span never needs to be larger. */
const MAX_ID = 257;

/**
 * The ways to split an id between linked repeats past which a failing match
 * takes too long: three `.*` on 256 characters (17 million) took 25 ms, four
 * seconds, and `(?:a|b)+[a-z0-9-]*[a-z]{2,5}` (264,000) 27 ms; two `.*`
 * (66,000) take 0.1 ms.
 */
const MAX_SPLITS = 100_000;

/** An optional atom that overlaps another atom of its group, or a group whose atoms are all optional. */
function ambiguousOptional(atoms: Atom[], flags: string): boolean {
  if (!atoms.some((atom) => atom.optional)) return false;
  if (atoms.every((atom) => atom.optional)) return true;
  const matchers = atoms.map((atom) => matcherOf(atom.text, flags));
  return atoms.some((atom, i) => atom.optional && matchers.some((other, j) => i !== j && overlap(matchers[i] as Matcher, other)));
}

/** `'repeats'` for `*`, `+`, `{n,}` and `{n,m}` with m > 1; `'optional'` for `?` and `{0,1}`; else undefined. */
function quantifierAt(source: string, index: number): 'repeats' | 'optional' | undefined {
  const char = source[index];
  if (char !== '*' && char !== '+' && char !== '?' && !(char === '{' && QUANTIFIER.test(source.slice(index)))) return undefined;
  return boundsAt(source, index)[1] > 1 ? 'repeats' : 'optional';
}

const QUANTIFIER = /^\{(\d+)(,(\d*))?\}/;

/** The least and most repeats the quantifier at `index` allows (Infinity when unbounded). */
function boundsAt(source: string, index: number): [number, number] {
  const char = source[index];
  if (char === '*') return [0, Infinity];
  if (char === '+') return [1, Infinity];
  if (char === '?') return [0, 1];
  const match = QUANTIFIER.exec(source.slice(index)) as RegExpExecArray;
  const least = Number(match[1]);
  return [least, match[2] === undefined ? least : match[3] === '' ? Infinity : Number(match[3])];
}

/** The last index of the quantifier at `index`, with its lazy `?` after it. */
function quantifierEnd(source: string, index: number): number {
  let end = source[index] === '{' ? source.indexOf('}', index) : index;
  if (source[end + 1] === '?') end++;
  return end;
}

/** The length of a group's `?:`, `?<name>` or lookaround mark at `index` (just past its `(`), 0 for a plain group. */
function groupSyntaxLength(source: string, index: number): number {
  return /^\?(?::|=|!|<=|<!|<[A-Za-z_$][\w$]*>)/.exec(source.slice(index))?.[0].length ?? 0;
}

/** Just past the `]` closing the class that opens at `start`. */
function classEnd(source: string, start: number): number {
  for (let i = start + 1; i < source.length; i++) {
    if (source[i] === '\\') i++;
    else if (source[i] === ']') return i + 1;
  }
  return source.length;
}

/** Characters that stand for the rest when checking what an atom matches: ASCII, and a few beyond it. */
const PROBES = [...Array.from({ length: 128 }, (_, code) => String.fromCharCode(code)), '\u00e9', '\u00a0', '\u2028', '\u4e2d', '\u{1f600}'];

function overlap(a: Matcher, b: Matcher): boolean {
  return PROBES.some((probe) => a(probe) && b(probe));
}

/**
 * True when repeats follow one another, each able to give up text to the
 * next, and the ways to split an id between them multiply past MAX_SPLITS:
 * a failing id tries every one. A repeat gives up text to the next when it
 * can match what stands between them and the two share a character
 * (`.*-.*`); one that cannot cross its separator (`[^-]*-`, `[a-z]+-`,
 * `\d+\.`) has a forced extent and ends the chain, as does a `|` between
 * them. A repeat that may match nothing and does not link (`-?` in
 * `\w+-?\w+`) is read as part of what stands between, not as a break.
 * Repeats inside a repeated group count as that group.
 */
function tooManySplits(repeats: Repeat[], source: string, flags: string): boolean {
  const outer = repeats.sort((a, b) => a.start - b.start).filter((repeat, i, all) => !all.some((other, j) => j < i && other.end >= repeat.end));
  let splits = 1;
  let before: Repeat | undefined;
  for (const repeat of outer) {
    const linked = before !== undefined && overlap(before.matches, repeat.matches) && crossable(source.slice(before.end, repeat.start), before.matches, flags);
    if (linked) splits *= repeat.span;
    else if (before !== undefined && repeat.optional) continue;
    else splits = repeat.span;
    before = repeat;
    if (splits > MAX_SPLITS) return true;
  }
  return false;
}

/**
 * Whether a repeat matching `matches` can also match the text between it and
 * the next repeat, `gap`: every part the gap requires, or, where the gap
 * holds alternatives, any part (none at all: crossable). A `|` in the group
 * holding the first repeat skips to that group's end, the path out of it; if
 * the group does not end within the gap, the two repeats are alternatives,
 * not in a row. A `|` in a group that opens in the gap drops the parts of
 * that group read so far (the path may enter its last alternative). A
 * backreference may match anything.
 */
function crossable(gap: string, matches: Matcher, flags: string): boolean {
  const parts: Array<{ text: string; required: boolean }> = [];
  /** Where each open group's parts begin, and where the group just closed began: a quantifier after `)` applies to all of it. */
  const opened: number[] = [];
  let lastFrom = 0;
  let depth = 0;
  let alternatives = false;
  for (let i = 0; i < gap.length; i++) {
    const char = gap[i] as string;
    if (char === '(') {
      depth++;
      opened.push(parts.length);
      i += groupSyntaxLength(gap, i + 1);
    } else if (char === ')') {
      depth--;
      lastFrom = opened.pop() ?? 0;
    } else if (char === '|') {
      alternatives = true;
      if (depth > 0) {
        parts.length = opened[opened.length - 1] ?? 0;
        continue;
      }
      const close = groupEnd(gap, i);
      if (close === undefined) return false;
      i = close;
    } else if (quantifierAt(gap, i) !== undefined) {
      const from = gap[i - 1] === ')' ? lastFrom : parts.length - 1;
      if (boundsAt(gap, i)[0] === 0) for (const part of parts.slice(from)) part.required = false;
      i = quantifierEnd(gap, i);
    } else {
      const end = char === '\\' ? i + 2 : char === '[' ? classEnd(gap, i) : i + 1;
      parts.push({ text: gap.slice(i, end), required: true });
      i = end - 1;
    }
  }
  const shared = (part: { text: string }): boolean => /^\\[1-9]/.test(part.text) || overlap(matches, matcherOf(part.text, flags));
  if (parts.length === 0) return true;
  return alternatives ? parts.some(shared) : parts.every((part) => !part.required || shared(part));
}

/** The index of the `)` closing the group the text at `from` is in, or undefined if it does not close in `text`. */
function groupEnd(text: string, from: number): number | undefined {
  let depth = 0;
  for (let i = from; i < text.length; i++) {
    const char = text[i];
    if (char === '\\') i++;
    else if (char === '[') i = classEnd(text, i) - 1;
    else if (char === '(') depth++;
    else if (char === ')' && depth-- === 0) return i;
  }
  return undefined;
}

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
  const offset = groupSyntaxLength(body, 0);
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
