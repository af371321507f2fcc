import { ANYTHING, anyOf, charSetOf, overlap, type CharSet } from './char-sets.ts';
import { atomEnd, boundsAt, groupEnd, groupSyntaxLength, quantifierAt, quantifierEnd } from './regex-syntax.ts';

/**
 * Compiling registry patterns. Every pattern matches the whole id (anchored
 * at both ends, simple or not: ai-query's Python registry anchored only plain words
 * and so let `worker-[0-9]+` match `worker-1/../admin`).
 */
export function compilePattern(pattern: string | RegExp, allowBacktracking: boolean): RegExp {
  const source = typeof pattern === 'string' ? pattern : pattern.source;
  // g and y make test() stateful; m would let ^ and $ match inside the id. A string's `.` matches
  // any character (s), U+2028 and U+2029 included, so `.*` is the catch-all it reads as.
  const flags = typeof pattern === 'string' ? 's' : pattern.flags.replace(/[gym]/g, '');
  let compiled: RegExp;
  try {
    // The source alone first: 'a)|(b' compiles only inside the wrapper, as ^(?:a)|(b)$, anchored at neither end.
    new RegExp(source, flags);
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
        'repeats that can give up text to each other (.*-.*-.*, or two pairs such as \\w+-?\\w+), whose cost grows with a power of the ' +
        'id\'s length; rewrite it (e.g. (a+)+ as a+, (a|ab)* as [ab]*, .*-.*-.* as [^-]*-[^-]*-.*, \\w+-?\\w+ as \\w+(?:-\\w+)?), ' +
        'or pass { allowBacktracking: true } if you have checked it',
    );
  }
  return compiled;
}

/**
 * True when matching can cost exponential or high polynomial time:
 * - a repeated group that can match the same text in more than one way: a
 *   repeat inside a repeated group (`(a+)+`, `(\d*x?)*`, `(?:a{2,})+`) unless
 *   the group marks where each pass ends (see {@link marksItsPasses}: the
 *   slug `[a-z0-9]+(?:-[a-z0-9]+)*` is fine), an optional part that
 *   overlaps another part of it, or a body that can be empty (`(?:a?a?)+`;
 *   not `(?:-?[a-z0-9])*`, whose `-` is no digit), or alternatives inside one
 *   that may overlap (`(a|a)*`, `(\w|\d)+`, `((a|ab)c)*`). Alternatives count
 *   as safe only when each is a plain literal and none is a prefix of another
 *   (`(foo|bar|baz)+`); anything else is refused, conservatively.
 * - repeats in a row, each able to give up text to the next, whose ways to
 *   split an id multiply past {@link MAX_SPLITS} (`.*-.*-.*`, `\d+\d+\d+`,
 *   `.{0,31}` six times); see {@link tooManySplits}.
 */
export function canBacktrackBadly(source: string, flags = ''): boolean {
  flags = flags.replace(/[gy]/g, '');
  const groups: Group[] = [];
  const repeats: Repeat[] = [];
  /** The atom just read: a quantifier after it applies to it. */
  let last: Atom | undefined;
  const read = (start: number, end: number, text: string | undefined, matches = text === undefined ? ANYTHING : charSetOf(text, flags), entry = matches, variable = false): void => {
    last = { start, end, text, matches, entry, variable, optional: false, quantified: false };
    groups[groups.length - 1]?.atoms.push(last);
  };
  for (let i = 0; i < source.length; i++) {
    const char = source[i] as string;
    const group = groups[groups.length - 1];
    if (char === '(') {
      groups.push({ risky: false, repeats: false, lookaround: /^\?(?:=|!|<=|<!)/.test(source.slice(i + 1)), start: i + 1, bars: [], atoms: [] });
      last = undefined;
      // `(?:`, `(?<name>`, lookarounds: syntax, not atoms.
      i += groupSyntaxLength(source, i + 1);
    } else if (char === '|') {
      group?.bars.push(i);
      last = undefined;
    } else if (char === ')') {
      const closed = groups.pop();
      if (closed === undefined) continue;
      const risky = closed.risky || (closed.repeats && !marksItsPasses(closed, i, repeats, source, flags)) || ambiguousOptional(closed.atoms)
        || (closed.bars.length > 0 && !distinctLiterals(alternatives(source, closed.start, closed.bars, i)));
      const quantifier = quantifierAt(source, i + 1);
      if (quantifier === 'repeats' && risky) return true;
      const parent = groups[groups.length - 1];
      if (parent !== undefined && (quantifier === 'repeats' || risky)) parent.risky = true;
      if (parent !== undefined && closed.repeats) parent.repeats = true;
      // The group is one atom of its parent, matching only what its atoms match. A lookaround or an
      // empty group matches no character: taken to match anything, which errs on the safe side.
      const opaque = closed.lookaround || closed.atoms.length === 0;
      const matches = opaque ? ANYTHING : anyOf(closed.atoms.map((atom) => atom.matches));
      const variable = closed.repeats || closed.bars.length > 0 || closed.atoms.some((atom) => atom.optional || atom.variable);
      read(closed.start - 1, i + 1, undefined, matches, opaque || closed.bars.length > 0 ? matches : entryOf(closed.atoms), variable);
    } else if (quantifierAt(source, i) !== undefined && last !== undefined) {
      const end = quantifierEnd(source, i);
      const [least, most] = boundsAt(source, i);
      last.optional = least === 0;
      last.quantified = true;
      if (most > 1 && group !== undefined) group.repeats = true;
      // An optional group (`(...)?`) is no repeat of its own: the repeats inside it stay in the row.
      const optionalGroup = last.text === undefined && most === 1;
      if (most > least && !optionalGroup) {
        // A group whose length varies ends anywhere, however few its passes (`(?:-\d+){1,2}`).
        const span = last.variable ? MAX_ID : Math.min(most - least + 1, MAX_ID);
        repeats.push({ matches: last.matches, entry: last.entry, start: last.start, end: end + 1, span, optional: least === 0 });
      }
      i = end;
      last = undefined;
    } else {
      const end = atomEnd(source, i, flags);
      read(i, end, source.slice(i, end));
      i = end - 1;
    }
  }
  return tooManySplits(repeats, source, flags);
}

/** An open group: does it hold something that makes repeating it ambiguous, does it hold a repeat, is it a lookaround, where its body starts, its `|`s, its atoms. */
interface Group {
  risky: boolean;
  repeats: boolean;
  lookaround: boolean;
  start: number;
  bars: number[];
  atoms: Atom[];
}

/**
 * One character's worth of pattern (`a`, `\d`, `[a-z]`, `.`), or a group
 * (`text` undefined): what any character it matches can be, what its first
 * can be, whether its length varies (a group's), whether it may match
 * nothing, whether a quantifier follows it.
 */
interface Atom {
  start: number;
  end: number;
  text: string | undefined;
  matches: CharSet;
  entry: CharSet;
  variable: boolean;
  optional: boolean;
  quantified: boolean;
}

/** A repeated atom: what it matches, what its first character can be, where it stands in the source, how many lengths it can take (at most MAX_ID), whether none. */
interface Repeat {
  matches: CharSet;
  entry: CharSet;
  start: number;
  end: number;
  span: number;
  optional: boolean;
}

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
function ambiguousOptional(atoms: Atom[]): boolean {
  if (!atoms.some((atom) => atom.optional)) return false;
  if (atoms.every((atom) => atom.optional)) return true;
  return atoms.some((atom) => atom.optional && atoms.some((other) => other !== atom && overlap(atom.matches, other.matches)));
}

/**
 * Whether a group that holds repeats marks where each pass through it ends,
 * so that repeating it splits a text one way only: its body is plain atoms
 * (no group, no `|`), it starts or ends with one unquantified atom that no
 * other atom of it matches (the `-` of `(?:-[a-z0-9]+)*`, the `.` of
 * `(?:[a-z]+\.)+`), and no two of its repeats can trade text. Each such
 * mark in the text then starts (or ends) a pass, and what lies between two
 * marks has one reading.
 */
function marksItsPasses(group: Group, close: number, repeats: Repeat[], source: string, flags: string): boolean {
  const { atoms } = group;
  if (group.bars.length > 0 || atoms.some((atom) => atom.text === undefined)) return false;
  const isMark = (atom: Atom | undefined): boolean =>
    atom !== undefined && !atom.quantified && atoms.every((other) => other === atom || !overlap(atom.matches, other.matches));
  if (!isMark(atoms[0]) && !isMark(atoms[atoms.length - 1])) return false;
  const inside = repeats.filter((repeat) => repeat.start >= group.start && repeat.end <= close);
  return !inside.some((repeat, j) => inside.slice(0, j).some((before) => linked(before, repeat, source, flags)));
}

/** What the first character matched by a run of atoms can be: up to the first that must match a character (a group might match nothing). */
function entryOf(atoms: Atom[]): CharSet {
  const firsts: CharSet[] = [];
  for (const atom of atoms) {
    firsts.push(atom.entry);
    if (!atom.optional && atom.text !== undefined) return anyOf(firsts);
  }
  return ANYTHING;
}

/**
 * True when the ways to split a failing id between repeats multiply past
 * MAX_SPLITS: one repeat scanning the id is the unit (MAX_ID), and each
 * repeat that an earlier one can give up text to (see {@link linked})
 * multiplies it by its span (`.*-.*`: 257 x 257). Over the whole pattern,
 * not one row: a failing id tries every split of one pair again for each
 * split of the next, even across a separator neither can cross (four
 * `\w+-?\w+` joined by `\.` took 4.7 s on 256 characters). This counts
 * some patterns dearer than they are (`.*-[0-9]+-.*`, whose digits have a
 * forced extent), which errs on the safe side. Repeats inside a repeated
 * group count as that group.
 */
function tooManySplits(repeats: Repeat[], source: string, flags: string): boolean {
  const outer = repeats.sort((a, b) => a.start - b.start).filter((repeat, i, all) => !all.some((other, j) => j < i && other.end >= repeat.end));
  let splits = MAX_ID;
  for (const [j, repeat] of outer.entries()) {
    if (outer.slice(0, j).some((before) => linked(before, repeat, source, flags))) splits *= repeat.span;
    if (splits > MAX_SPLITS) return true;
  }
  return false;
}

/**
 * Whether `before` can give up text to the later `repeat`: it can match
 * everything required between them (`.*-.*`), and it or what stands between
 * can match the first character `repeat` can match. One that cannot cross what stands between (`[^-]*-`, `[a-z]+-`,
 * `\d+\.`) has a forced extent there. Every earlier repeat is asked, not
 * only the one just before, so a repeat that may match nothing between two
 * linked ones (`-?` in `\w+-?\w+`) cannot hide their link.
 */
function linked(before: Repeat, repeat: Repeat, source: string, flags: string): boolean {
  const gap = source.slice(before.end, repeat.start);
  if (!crossable(gap, before.matches, flags)) return false;
  // What the first gives up shifts what stands between, which gives up text in turn: [a-z]*[a-z0-9]{10}\d*.
  return overlap(anyOf([before.matches, ...atomsOf(gap, flags)]), repeat.entry);
}

/** The sets of the atoms written in a stretch of pattern (group marks, quantifiers and bars aside). */
function atomsOf(text: string, flags: string): CharSet[] {
  const sets: CharSet[] = [];
  for (let i = 0; i < text.length; i++) {
    const char = text[i] as string;
    if (char === '(') i += groupSyntaxLength(text, i + 1);
    else if (quantifierAt(text, i) !== undefined) i = quantifierEnd(text, i);
    else if (char !== ')' && char !== '|') {
      const end = atomEnd(text, i, flags);
      sets.push(charSetOf(text.slice(i, end), flags));
      i = end - 1;
    }
  }
  return sets;
}

/**
 * Whether a repeat matching `matches` can also match the text between it and
 * the next repeat, `gap`: every part the gap requires, or, where the gap
 * holds alternatives, any part (none at all: crossable). A `|` in the group
 * holding the first repeat skips to that group's end, the path out of it; if
 * the group does not end within the gap, the two repeats are alternatives,
 * not in a row. A `|` in a group that opens in the gap drops the parts of
 * that group read so far (the path may enter its last alternative). A
 * backreference or an assertion (`\b`, `^`) may stand for anything.
 */
function crossable(gap: string, matches: CharSet, flags: string): boolean {
  /** What stands between: each atom, or each group closed in the gap, and whether the repeat can match it (a group: through any one of its branches). */
  type Part = { required: boolean; crossed: boolean };
  let parts: Part[] = [];
  /** Groups opened in the gap: where their parts begin, and the verdicts of their branches before the current one. */
  const open: Array<{ from: number; branches: boolean[] }> = [];
  const passes = (branch: Part[]): boolean => branch.every((part) => !part.required || part.crossed);
  /** Where the group just closed begins in `parts`: a quantifier after `)` applies to all of it. */
  let lastFrom = 0;
  let alternatives = false;
  for (let i = 0; i < gap.length; i++) {
    const char = gap[i] as string;
    if (char === '(' && /^\?(?:=|!|<=|<!)/.test(gap.slice(i + 1))) {
      // A lookaround consumes nothing: nothing in it stands between the two repeats.
      const close = groupEnd(gap, i + 1, flags);
      if (close === undefined) return true;
      i = close;
    } else if (char === '(') {
      open.push({ from: parts.length, branches: [] });
      i += groupSyntaxLength(gap, i + 1);
    } else if (char === ')') {
      const group = open.pop();
      if (group === undefined) {
        // The close of the group holding the first repeat: a quantifier on it makes all read so far optional.
        lastFrom = 0;
        continue;
      }
      // An empty branch, or one the repeat can match throughout, lets it across the group.
      const crossed = [...group.branches, passes(parts.slice(group.from))].some(Boolean);
      parts = parts.slice(0, group.from);
      parts.push({ required: true, crossed });
      lastFrom = group.from;
    } else if (char === '|') {
      const group = open[open.length - 1];
      if (group !== undefined) {
        group.branches.push(passes(parts.slice(group.from)));
        parts = parts.slice(0, group.from);
        continue;
      }
      // A | in the group holding the first repeat: the path out of it skips to that group's end; if it
      // does not end within the gap, the two repeats are alternatives, not in a row.
      alternatives = true;
      const close = groupEnd(gap, i, flags);
      if (close === undefined) return false;
      i = close;
    } else if (quantifierAt(gap, i) !== undefined) {
      const from = gap[i - 1] === ')' ? lastFrom : parts.length - 1;
      if (boundsAt(gap, i)[0] === 0) for (const part of parts.slice(from)) part.required = false;
      i = quantifierEnd(gap, i);
    } else {
      const end = atomEnd(gap, i, flags);
      parts.push({ required: true, crossed: overlap(matches, charSetOf(gap.slice(i, end), flags)) });
      i = end - 1;
    }
  }
  // Groups still open hold the later repeat: the path enters their current branch, whose parts count as read.
  if (alternatives) return parts.length === 0 || parts.some((part) => !part.required || part.crossed);
  return passes(parts);
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
