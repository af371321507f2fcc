/**
 * Compiling registry patterns. Every pattern matches the whole id (anchored
 * at both ends, simple or not: the spec's original anchored only plain words
 * and so let `worker-[0-9]+` match `worker-1/../admin`).
 */
export function compilePattern(pattern: string | RegExp, allowBacktracking: boolean): RegExp {
  const source = typeof pattern === 'string' ? pattern : pattern.source;
  // g and y make test() stateful; m would let ^ and $ match inside the id.
  const flags = typeof pattern === 'string' ? '' : pattern.flags.replace(/[gym]/g, '');
  let compiled: RegExp;
  try {
    compiled = new RegExp(`^(?:${source})$`, flags);
  } catch (error) {
    throw new TypeError(`AgentRegistry.register: pattern ${String(pattern)} does not compile: ${(error as Error).message}`, {
      cause: error,
    });
  }
  if (!allowBacktracking && hasNestedQuantifier(source)) {
    throw new TypeError(
      `AgentRegistry.register: pattern ${String(pattern)} nests a quantifier inside a quantified group, ` +
        'which can backtrack catastrophically on hostile ids; rewrite it (e.g. (a+)+ as a+), ' +
        'or pass { allowBacktracking: true } if you have checked it',
    );
  }
  return compiled;
}

/**
 * True when a quantified group contains a quantifier of its own, e.g. `(a+)+`,
 * `(\d*x)*`, `(?:a{2,})+`: the classic shape of exponential backtracking.
 */
export function hasNestedQuantifier(source: string): boolean {
  const groups: boolean[] = []; // per open group: does it contain a quantifier?
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
    if (char === '[') inClass = true;
    else if (char === '(') groups.push(false);
    else if (char === ')') {
      const containsQuantifier = groups.pop() ?? false;
      const quantified = isQuantifier(source, i + 1);
      if (quantified && containsQuantifier) return true;
      if ((quantified || containsQuantifier) && groups.length > 0) groups[groups.length - 1] = true;
    } else if (isQuantifier(source, i) && groups.length > 0) {
      groups[groups.length - 1] = true;
    }
  }
  return false;
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
