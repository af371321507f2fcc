/**
 * What one atom of a registry pattern can match, a character at a time, for
 * the backtracking check in patterns.ts: do two atoms share a character?
 *
 * `has` tests a character with the atom's own regex (flags included, so
 * case folding is the engine's). `finite` lists every character the atom
 * matches when its text says so in a short list (a literal, `\d`, `\s`,
 * `[a-z_-]`), and is undefined otherwise (`.`, `[^-]`, `\W`, `\p{L}`). Two
 * atoms overlap when a listed character of one is matched by the other; two
 * unlisted ones are taken to overlap, since no sample of characters proves
 * that, say, `[^A-Z]` and `\p{Lu}` share none (they share `É`).
 */
export interface CharSet {
  has(char: string): boolean;
  readonly finite: readonly string[] | undefined;
}

/** A backreference, an assertion, a group we cannot read: anything, or nothing. */
export const ANYTHING: CharSet = { has: () => true, finite: undefined };

export function overlap(a: CharSet, b: CharSet): boolean {
  let known = overlaps.get(a);
  if (known === undefined) overlaps.set(a, (known = new WeakMap()));
  let answer = known.get(b);
  if (answer === undefined) {
    answer = a.finite !== undefined ? a.finite.some((char) => b.has(char)) : b.finite !== undefined ? b.finite.some((char) => a.has(char)) : true;
    known.set(b, answer);
  }
  return answer;
}

/** Answers already worked out: a pattern's check asks about the same pairs of atoms many times. */
const overlaps = new WeakMap<CharSet, WeakMap<CharSet, boolean>>();

/** The characters any of `sets` matches (a group's atoms). */
export function anyOf(sets: readonly CharSet[]): CharSet {
  const finite = sets.every((set) => set.finite !== undefined) ? [...new Set(sets.flatMap((set) => set.finite as readonly string[]))] : undefined;
  return { has: (char) => sets.some((set) => set.has(char)), finite };
}

/**
 * The set of one single-character atom: a literal, an escape or a class. A
 * backreference (`\1`, `\k<name>`) or an assertion (`\b`, `\B`, `^`, `$`)
 * stands for text of any kind, or for none: ANYTHING.
 */
export function charSetOf(atom: string, flags: string): CharSet {
  const key = `${flags}/${atom}`;
  let set = sets.get(key);
  if (set === undefined) {
    // Bounded: patterns are registered at start-up, but a long-lived process may register many.
    if (sets.size >= 1000) sets.clear();
    sets.set(key, (set = readCharSet(atom, flags)));
  }
  return set;
}

/** Sets already read, by flags and atom: the same atom text is compared many times. */
const sets = new Map<string, CharSet>();

function readCharSet(atom: string, flags: string): CharSet {
  // With v, a class may hold strings (`[\q{ab}]`), which no one-character test sees.
  if (/^(?:\\[1-9kbB]|\^|\$)/.test(atom) || (atom.startsWith('[') && /v/.test(flags))) return ANYTHING;
  let regex: RegExp;
  try {
    regex = new RegExp(`^(?:${atom})$`, flags);
  } catch {
    return ANYTHING;
  }
  const has = (char: string): boolean => regex.test(char);
  const listed = listChars(atom, flags);
  // A listed character the regex does not match means the text was misread: then list nothing.
  return { has, finite: listed !== undefined && listed.every(has) ? listed : undefined };
}

/** Ranges larger than this are not listed: `[\u0000-\uffff]` is as good as `.` here. */
const MAX_LISTED = 4096;

const DIGITS = [...'0123456789'];
const WORD = [...'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_'];
/** With both `i` and `u` (or `v`), `\w` also matches these two, which fold to `s` and `k`. */
const WORD_FOLDED = ['\u017f', '\u212a'];
const SPACE = [...'\t\n\v\f\r \u00a0\u1680\u2028\u2029\u202f\u205f\u3000\ufeff', ...Array.from({ length: 11 }, (_, i) => String.fromCharCode(0x2000 + i))];

/** Every character `atom` matches, read from its text; undefined when that is not a short list. */
function listChars(atom: string, flags: string): string[] | undefined {
  const unicode = /[uv]/.test(flags);
  if (atom === '.') return undefined;
  if (atom.startsWith('[')) return classChars(atom, flags);
  if (atom.startsWith('\\')) return escapeChars(atom, flags, false);
  const chars = unicode ? [...atom] : atom.split('');
  return chars.length === 1 ? [atom] : undefined;
}

/** `\d`, `\w`, `\s` as lists; one character for a character escape; undefined for `\D`, `\W`, `\S`, `\p{...}` and the like. */
function escapeChars(escape: string, flags: string, inClass: boolean): string[] | undefined {
  const unicode = /[uv]/.test(flags);
  const letter = escape[1] ?? '';
  if (letter === 'd') return DIGITS;
  if (letter === 'w') return /i/.test(flags) && unicode ? [...WORD, ...WORD_FOLDED] : WORD;
  if (letter === 's') return SPACE;
  const char = escapedChar(escape, unicode, inClass);
  return char === undefined ? undefined : [char];
}

/** The one character a character escape stands for: `\x41`, `\u0041`, `\u{1F600}`, `\cJ`, `\0`, `\n`, `\-`; undefined for others. */
function escapedChar(escape: string, unicode: boolean, inClass: boolean): string | undefined {
  const hex = /^\\(?:x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|u\{([0-9a-fA-F]+)\})$/.exec(escape);
  if (hex !== null) {
    const code = Number.parseInt(hex[1] ?? hex[2] ?? hex[3] ?? '', 16);
    return code <= 0x10ffff ? String.fromCodePoint(code) : undefined;
  }
  const control = /^\\c([A-Za-z])$/.exec(escape);
  if (control !== null) return String.fromCharCode((control[1] as string).charCodeAt(0) % 32);
  const simple: Record<string, string> = { '\\0': '\0', '\\t': '\t', '\\n': '\n', '\\v': '\v', '\\f': '\f', '\\r': '\r' };
  if (simple[escape] !== undefined) return simple[escape];
  if (inClass && escape === '\\b') return '\b';
  // An escaped punctuation mark stands for itself (`\-`, `\.`, `\/`); an escaped letter or digit may mean something else.
  const rest = escape.slice(1);
  const single = unicode ? [...rest].length === 1 : rest.length === 1;
  return single && !/[A-Za-z0-9]/.test(rest) ? rest : undefined;
}

/** A class member's escape read whole: `\x41`, `\u0041`, `\cJ`, a legacy octal `\101`; with u also `\u{1F600}` and `\p{L}` (without, `\u{` is `u{`). */
const MEMBER = /^\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|c[A-Za-z]|[0-7]{2,3})/;
const UNICODE_MEMBER = /^\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|u\{[0-9a-fA-F]+\}|c[A-Za-z]|[pP]\{[^}]*\})/;

/** The characters of a class such as `[a-z0-9_-]` or `[\d.]`; undefined for a negated class, a `v`-flag class, or one too large. */
function classChars(text: string, flags: string): string[] | undefined {
  if (text.startsWith('[^') || /v/.test(flags) || !text.endsWith(']')) return undefined;
  const unicode = /u/.test(flags);
  const body = text.slice(1, -1);
  // Each member: an escape (read whole, as patterns.ts reads escapes) or one character.
  const members: Array<{ text: string; chars: string[] | undefined }> = [];
  for (let i = 0; i < body.length;) {
    let end = i + 1;
    if (body[i] === '\\') end = i + ((unicode ? UNICODE_MEMBER : MEMBER).exec(body.slice(i))?.[0].length ?? 2);
    else if (unicode && (body.codePointAt(i) ?? 0) > 0xffff) end = i + 2;
    const member = body.slice(i, end);
    members.push({ text: member, chars: member.startsWith('\\') ? escapeChars(member, flags, true) : [member] });
    i = end;
  }
  const chars: string[] = [];
  for (let k = 0; k < members.length; k++) {
    const member = members[k] as { text: string; chars: string[] | undefined };
    const to = members[k + 2];
    if (members[k + 1]?.text === '-' && to !== undefined && member.chars?.length === 1 && to.chars?.length === 1) {
      const from = (member.chars[0] as string).codePointAt(0) as number;
      const last = (to.chars[0] as string).codePointAt(0) as number;
      if (last - from > MAX_LISTED) return undefined;
      for (let code = from; code <= last; code++) chars.push(String.fromCodePoint(code));
      k += 2;
    } else if (member.chars === undefined) {
      return undefined;
    } else {
      chars.push(...member.chars);
    }
    if (chars.length > MAX_LISTED) return undefined;
  }
  return [...new Set(chars)];
}
