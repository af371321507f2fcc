/**
 * Reading a regex's source, as the backtracking check needs it: where an
 * escape, a class, an atom or a group ends, and what a quantifier allows.
 */

/** `'repeats'` for `*`, `+`, `{n,}` and `{n,m}` with m > 1; `'optional'` for `?` and `{0,1}`; else undefined. */
export function quantifierAt(source: string, index: number): 'repeats' | 'optional' | undefined {
  const char = source[index];
  if (char !== '*' && char !== '+' && char !== '?' && !(char === '{' && QUANTIFIER.test(source.slice(index)))) return undefined;
  return boundsAt(source, index)[1] > 1 ? 'repeats' : 'optional';
}

const QUANTIFIER = /^\{(\d+)(,(\d*))?\}/;

/** The least and most repeats the quantifier at `index` allows (Infinity when unbounded). */
export function boundsAt(source: string, index: number): [number, number] {
  const char = source[index];
  if (char === '*') return [0, Infinity];
  if (char === '+') return [1, Infinity];
  if (char === '?') return [0, 1];
  const match = QUANTIFIER.exec(source.slice(index)) as RegExpExecArray;
  const least = Number(match[1]);
  return [least, match[2] === undefined ? least : match[3] === '' ? Infinity : Number(match[3])];
}

/** The last index of the quantifier at `index`, with its lazy `?` after it. */
export function quantifierEnd(source: string, index: number): number {
  let end = source[index] === '{' ? source.indexOf('}', index) : index;
  if (source[end + 1] === '?') end++;
  return end;
}

/** The length of a group's `?:`, `?<name>` or lookaround mark at `index` (just past its `(`), 0 for a plain group. */
export function groupSyntaxLength(source: string, index: number): number {
  return /^\?(?::|=|!|<=|<!|<[A-Za-z_$][\w$]*>)/.exec(source.slice(index))?.[0].length ?? 0;
}

/**
 * Just past the one-character atom at `index`: an escape, a class, or a
 * character (with u or v, one beyond U+FFFF is two UTF-16 units, one atom,
 * as the engine reads it).
 */
export function atomEnd(source: string, index: number, flags: string): number {
  if (source[index] === '\\') return escapeEnd(source, index, flags);
  if (source[index] === '[') return classEnd(source, index, flags);
  return /[uv]/.test(flags) && (source.codePointAt(index) ?? 0) > 0xffff ? index + 2 : index + 1;
}

/** Just past the `]` closing the class that opens at `start`; with the v flag, classes nest (`[[a-z]--[aeiou]]`). */
function classEnd(source: string, start: number, flags: string): number {
  const nests = /v/.test(flags);
  let depth = 0;
  for (let i = start + 1; i < source.length; i++) {
    if (source[i] === '\\') i++;
    else if (source[i] === '[' && nests) depth++;
    else if (source[i] === ']' && depth-- === 0) return i + 1;
  }
  return source.length;
}

/** The index of the `)` closing the group the text at `from` is in, or undefined if it does not close in `text`. */
export function groupEnd(text: string, from: number, flags: string): number | undefined {
  let depth = 0;
  for (let i = from; i < text.length; i++) {
    const char = text[i];
    if (char === '\\') i++;
    else if (char === '[') i = classEnd(text, i, flags) - 1;
    else if (char === '(') depth++;
    else if (char === ')' && depth-- === 0) return i;
  }
  return undefined;
}

/**
 * Just past the escape at `index`: `\d`, and the longer `\u0041`, `\x41`,
 * `\cJ` and `\k<name>`, each one atom, as are `\u{1F600}` and `\p{L}` with
 * the `u` or `v` flag (without, `\u{2}` is `u` twice, which the quantifier
 * reading gets right).
 */
function escapeEnd(source: string, index: number, flags: string): number {
  const escape = /[uv]/.test(flags) ? UNICODE_ESCAPE : ESCAPE;
  return index + (escape.exec(source.slice(index))?.[0].length ?? 2);
}

// A number of more than one digit is one atom too: a backreference (`\\12`), or without u a legacy octal escape (`\\101` is A).
const ESCAPE = /^\\(?:u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|c[A-Za-z]|k<[^>]*>|[0-9]{2,})/;
const UNICODE_ESCAPE = /^\\(?:u\{[0-9a-fA-F]+\}|u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|c[A-Za-z]|[pP]\{[^}]*\}|k<[^>]*>|[0-9]{2,})/;
