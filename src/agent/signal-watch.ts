/**
 * One 'abort' listener on a caller's signal, however many turns follow it. A
 * host that hands one shutdown signal to every `handle()` call, or a caller
 * passing one signal to many agents' `chat()`, would otherwise add a
 * listener per turn in flight: Node warns past ten
 * (MaxListenersExceededWarning, "possible memory leak"), and removing each
 * costs a scan of them all.
 */
const watched = new WeakMap<AbortSignal, Set<() => void>>();

/** Calls `callback` once when `signal` aborts (not if it already has: check `aborted` first). */
export function whenAborted(signal: AbortSignal, callback: () => void): void {
  let callbacks = watched.get(signal);
  if (callbacks === undefined) {
    const all = new Set<() => void>();
    callbacks = all;
    watched.set(signal, all);
    signal.addEventListener(
      'abort',
      () => {
        watched.delete(signal);
        for (const each of all) each();
      },
      { once: true },
    );
  }
  callbacks.add(callback);
}

/** Stops a `whenAborted` callback. */
export function stopWatching(signal: AbortSignal, callback: () => void): void {
  watched.get(signal)?.delete(callback);
}
