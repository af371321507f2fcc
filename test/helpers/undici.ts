/**
 * Node's fetch is undici, whose own headersTimeout and bodyTimeout (300 s by
 * default) stop a request whatever a caller's own `timeout`. A fetch through
 * the same undici class as the global dispatcher's (undici is not a
 * dependency), with limits short enough for a test.
 */
export async function shortUndiciTimeouts(): Promise<typeof fetch> {
  return undiciFetch({ headersTimeout: 150, bodyTimeout: 150 });
}

/** A fetch through an undici Agent of the global dispatcher's class, made with `options` (`connect: { ca }` ...). */
export async function undiciFetch(options: object): Promise<typeof fetch> {
  await fetch('data:,'); // makes Node's global dispatcher
  // Node 26 keeps its Agent under `.2`, and under `.1` a wrapper for older undici copies.
  const slots = globalThis as Record<symbol, unknown>;
  const global = (slots[Symbol.for('undici.globalDispatcher.2')] ?? slots[Symbol.for('undici.globalDispatcher.1')]) as { constructor: new (options: object) => unknown };
  const dispatcher = new global.constructor(options);
  return (url, init) => fetch(url, { ...init, dispatcher } as RequestInit);
}
