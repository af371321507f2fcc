/**
 * One 'abort' listener on a caller's signal, however many turns or calls follow it,
 * and none once none does. A host that hands one shutdown signal to every
 * `handle()` call, or a caller passing one signal to many agents' `chat()`,
 * would otherwise add a listener per turn in flight: Node warns past ten
 * (MaxListenersExceededWarning, "possible memory leak"), and removing each
 * costs a scan of them all.
 */
interface Watch {
  callbacks: Set<() => void>;
  listener: () => void;
}

const watched = new WeakMap<AbortSignal, Watch>();

/** Calls `callback` once when `signal` aborts (not if it already has: check `aborted` first). */
export function whenAborted(signal: AbortSignal, callback: () => void): void {
  let watch = watched.get(signal);
  if (watch === undefined) {
    const callbacks = new Set<() => void>();
    const listener = (): void => {
      // Live: one stopped by an earlier callback here is not called, as a listener removed mid-dispatch is not.
      for (const each of callbacks) each();
      watched.delete(signal);
    };
    watch = { callbacks, listener };
    watched.set(signal, watch);
    signal.addEventListener('abort', listener, { once: true });
  }
  watch.callbacks.add(callback);
}

/** Stops a `whenAborted` callback; the signal keeps no listener once none is left. */
export function stopWatching(signal: AbortSignal, callback: () => void): void {
  const watch = watched.get(signal);
  if (watch === undefined || !watch.callbacks.delete(callback) || watch.callbacks.size > 0) return;
  watched.delete(signal);
  signal.removeEventListener('abort', watch.listener);
}
