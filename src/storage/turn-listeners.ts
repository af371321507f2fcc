import type { CancelRequest } from './turn-channel.ts';

type CancelHandler = (agentId: string, request: CancelRequest) => string[];

/**
 * What a TurnChannel keeps in its process, whatever carries its messages:
 * the followers of each turn's log, the cancel handlers, and its own cancel
 * requests waiting for answers.
 */
export class TurnListeners {
  readonly #followers = new Map<string, Set<() => void>>();
  readonly #handlers = new Set<CancelHandler>();
  readonly #waiting = new Map<string, (ids: string[]) => void>();

  /** No follower and no handler: nothing needs the channel's connection. */
  get idle(): boolean {
    return this.#followers.size === 0 && this.#handlers.size === 0;
  }

  follow(turnId: string, wake: () => void): () => void {
    let set = this.#followers.get(turnId);
    if (set === undefined) this.#followers.set(turnId, (set = new Set()));
    set.add(wake);
    return () => {
      set.delete(wake);
      if (set.size === 0 && this.#followers.get(turnId) === set) this.#followers.delete(turnId);
    };
  }

  /** `turnId`'s log may have grown. */
  wake(turnId: string): void {
    for (const wake of [...(this.#followers.get(turnId) ?? [])]) wake();
  }

  /** Every follower reads again (after a lost connection, what came meanwhile). */
  wakeAll(): void {
    for (const set of [...this.#followers.values()]) for (const wake of [...set]) wake();
  }

  onCancel(handler: CancelHandler): () => void {
    this.#handlers.add(handler);
    return () => {
      this.#handlers.delete(handler);
    };
  }

  /**
   * A cancel request `req` heard: the ids the handlers cancelled. This
   * process's own requests reach it too: what it holds it has cancelled already, or keeps.
   */
  cancelHere(req: string, agentId: string, request: CancelRequest): string[] {
    const ids: string[] = [];
    if (!this.#waiting.has(req)) for (const handler of this.#handlers) ids.push(...handler(agentId, request));
    return ids;
  }

  /** Hears the answers to this process's request `req` until the returned function is called. */
  awaitAnswers(req: string, onAnswer: (ids: string[]) => void): () => void {
    this.#waiting.set(req, onAnswer);
    return () => {
      this.#waiting.delete(req);
    };
  }

  /**
   * Sends this process's cancel request `req` and gathers the ids the processes cancelled, until `expected`
   * answered (or the count `send` resolves to), `waitMs` passed, or, with `stopAtFound`, the one turn named was
   * found. Rejects when `send` fails: a request no process could hear is not an answer that nothing runs.
   */
  gather(req: string, request: CancelRequest, waitMs: number, send: () => Promise<number | undefined>, expected = Infinity, stopAtFound = false): Promise<string[]> {
    const heard: string[] = [];
    let answers = 0;
    return new Promise<string[]>((resolve, reject) => {
      const done = (error?: unknown): void => {
        clearTimeout(timer);
        stop();
        if (error === undefined) resolve(heard);
        else reject(error);
      };
      const timer = setTimeout(() => done(), waitMs);
      const stop = this.awaitAnswers(req, (ids) => {
        heard.push(...ids);
        if (++answers >= expected || (stopAtFound && ids.length > 0 && !('all' in request))) done();
      });
      send().then((receivers) => {
        if (receivers === undefined) return;
        expected = receivers;
        if (answers >= expected) done();
      }, done);
    });
  }

  answered(req: string, ids: string[]): void {
    this.#waiting.get(req)?.(ids);
  }
}
