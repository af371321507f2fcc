import { AgentRouterError } from '../errors.ts';
import type { Model } from '../models/model.ts';
import { MemoryStorage } from '../storage/memory.ts';
import type { Storage, Unlock } from '../storage/storage.ts';
import type { ChatMessage, JsonObject, TokenUsage } from '../types.ts';
import { actionArguments, actionsOf, unknownMethod } from './actions.ts';
import { TurnCancel } from './cancel.ts';
import { AbortWatch, Mailbox } from './mailbox.ts';

export interface AgentOptions<S extends JsonObject = JsonObject> {
  /** What writes the replies; `echoModel()` for an offline demo. */
  model?: Model | undefined;
  /** The system prompt, sent with every turn. */
  system?: string | undefined;
  /**
   * Where state and history persist.
   * @defaultValue one process-wide MemoryStorage
   */
  storage?: Storage | undefined;
  /** State of an agent never stored before; copied, never shared between instances. */
  initialState?: S | undefined;
}

export interface TurnOptions {
  /** Aborting it cancels the turn (the model call too); the turn then changes nothing. */
  signal?: AbortSignal | undefined;
}

/**
 * The router's way to hand a turn its TurnCancel instead of a `signal`, so
 * that no AbortController is made unless something asks for a signal.
 * Internal: not exported from the package.
 */
export const turnCancel: unique symbol = Symbol('agent-router.turnCancel');

/** Turn options carrying the router's cancel. */
export function cancelledBy(cancel: TurnCancel): TurnOptions {
  return { [turnCancel]: cancel } as TurnOptions;
}

/** The turn's cancel: the router's, a caller's signal followed, or none (then `own` is made here). */
function cancelOf(options: TurnOptions): { cancel: TurnCancel; own: boolean } {
  const given = (options as { [turnCancel]?: TurnCancel })[turnCancel];
  if (given !== undefined) return { cancel: given, own: false };
  return { cancel: new TurnCancel(options.signal), own: options.signal === undefined };
}

export type StateUpdate<S> = Partial<S> | ((state: S) => Partial<S>);

const processStorage = new MemoryStorage();

/**
 * One conversational agent: an id, a model, persisted state and history.
 *
 * Turns (chat, stream, invoke, setState outside a turn) run one at a time in
 * arrival order. A turn that throws or is aborted leaves state and history as
 * they were; a turn that completes is written to storage as one commit.
 *
 * @example
 * class Counter extends Agent<{ count: number }> {
 *   static actions = ['increment'];
 *   constructor(id: string) { super(id, { model: echoModel(), initialState: { count: 0 } }); }
 *   async increment({ by = 1 } = {}) { await this.setState({ count: this.state.count + by }); return this.state.count; }
 * }
 */
export class Agent<S extends JsonObject = JsonObject> {
  /** Methods callable through `/invoke`; nothing else is. */
  static actions: readonly string[] = [];

  readonly id: string;
  model: Model | undefined;
  system: string | undefined;
  readonly storage: Storage;

  #state: S;
  #messages: ChatMessage[] = [];
  #version = 0;
  #loading: Promise<void> | undefined;
  #loaded = false;
  #staged: S | undefined;
  #inTurn = false;
  /** The running chat turn's user message is the history's last entry, not yet committed. */
  #pendingUser = false;
  /** Actions cut at their turn's end that are still running. */
  #abandoned = 0;
  readonly #mailbox = new Mailbox();

  constructor(id: string, options: AgentOptions<S> = {}) {
    if (typeof id !== 'string' || id.length === 0) {
      throw new TypeError('Agent: the first argument is the agent id, a non-empty string, e.g. new Agent("support-bot", { model })');
    }
    if (typeof options !== 'object' || options === null) {
      throw new TypeError('Agent: the second argument is an options object, e.g. { model: echoModel(), system: "..." }');
    }
    this.id = id;
    this.model = options.model;
    this.system = options.system;
    this.storage = options.storage ?? processStorage;
    this.#state = checkState(structuredClone(options.initialState ?? {}), 'initialState') as S;
    actionsOf(this.constructor as typeof Agent);
  }

  /** The current state: a running turn's own changes included. Treat it as read-only; change it with setState. */
  get state(): S {
    return this.#staged ?? this.#state;
  }

  /** The committed history, oldest first. */
  get messages(): readonly ChatMessage[] {
    return this.#pendingUser ? this.#messages.slice(0, -1) : this.#messages;
  }

  /** The version of the committed record (0 before the first commit). */
  get version(): number {
    return this.#version;
  }

  /** True while a turn runs or waits. */
  get busy(): boolean {
    return this.#mailbox.size > 0;
  }

  /** Loads state and history from storage; the first call does the work, later calls share it. */
  load(): Promise<void> {
    this.#loading ??= this.#refresh(true).then(
      () => {
        this.#loaded = true;
      },
      (error: unknown) => {
        this.#loading = undefined;
        throw error;
      },
    );
    return this.#loading;
  }

  /**
   * The committed state, never a running turn's half-done changes, and never
   * staler than storage: another process may have written a newer version.
   */
  async snapshot(): Promise<S> {
    await this.load();
    await this.#refresh(false);
    return this.#state;
  }

  /**
   * True while an action that was cut (timeout, abort) but ignored it is
   * still running. Such an instance refuses setState outside a turn, so the
   * abandoned action cannot change state later; a pool replaces it.
   */
  get abandoned(): boolean {
    return this.#abandoned > 0;
  }

  /** Merges into state. Inside a turn (an action) it joins that turn; outside, it is a turn of its own. */
  async setState(update: StateUpdate<S>): Promise<S> {
    if (this.#inTurn) return this.#stage(update);
    if (this.#abandoned > 0) {
      throw new AgentRouterError(409, 'turn_ended', `Agent ${JSON.stringify(this.id)}: setState from an action whose turn was already cut`);
    }
    return this.#turn({ cancel: new TurnCancel(), own: true }, async () => ({ result: this.#stage(update), append: [] }));
  }

  /** One chat turn; resolves with the whole reply. */
  async chat(message: string, options: TurnOptions = {}): Promise<string> {
    let reply = '';
    for await (const chunk of this.stream(message, options)) reply += chunk;
    return reply;
  }

  /**
   * One chat turn, streamed: the reply's chunks as the model writes them.
   * Stopping the iteration early aborts the turn.
   */
  stream(message: string, options: TurnOptions = {}): AsyncIterable<string> {
    if (typeof message !== 'string') throw new TypeError('Agent.stream: message must be a string');
    return this.#streamTurn(message, cancelOf(options));
  }

  /** Calls an action listed in the class's static `actions`, as one turn. */
  async invoke(method: string, params?: unknown, options: TurnOptions = {}): Promise<unknown> {
    const ctor = this.constructor as typeof Agent;
    if (!actionsOf(ctor).has(method)) throw unknownMethod(this.id, method);
    const action = (this as unknown as Record<string, (...args: unknown[]) => unknown>)[method] as (...args: unknown[]) => unknown;
    const args = actionArguments(params);
    return this.#turn(cancelOf(options), async () => ({ result: await action.apply(this, args), append: [] }));
  }

  #stage(update: StateUpdate<S>): S {
    const current = this.state;
    const partial = typeof update === 'function' ? update(current) : update;
    this.#staged = { ...current, ...checkState(partial, 'setState') } as S;
    return this.#staged;
  }

  async *#streamTurn(message: string, { cancel, own }: { cancel: TurnCancel; own: boolean }): AsyncGenerator<string> {
    const model = this.model;
    if (model === undefined) {
      throw new AgentRouterError(500, 'no_model', `Agent ${JSON.stringify(this.id)} has no model; pass { model } to its constructor`);
    }
    const session = await this.#begin(cancel);
    // A cancel made here is aborted only below, at the turn's end: nothing to watch for.
    const watch = new AbortWatch(own ? undefined : cancel);
    let completed = false;
    const user: ChatMessage = { role: 'user', content: message };
    try {
      // The model sees the history with the new message last. Pushed in place
      // rather than copied, so a turn costs the same at any history length;
      // taken back below if the turn does not complete.
      const history = this.#messages;
      history.push(user);
      this.#pendingUser = true;
      // The caller's signal goes to the model as it is; otherwise one is made
      // if the model reads it, so stopping the iteration early still aborts it.
      const request = { system: this.system, messages: history, get signal() { return cancel.signal; } };
      let reply = '';
      let usage: TokenUsage | undefined;
      const chunks = model.stream(request)[Symbol.asyncIterator]();
      // Not `for await`: it would wait forever on a model that ignores its signal.
      try {
        while (true) {
          const next = await watch.race(chunks.next());
          if (next.done === true) break;
          const chunk = next.value;
          cancel.throwIfAborted();
          if (typeof chunk === 'string') {
            if (chunk.length === 0) continue;
            reply += chunk;
            yield chunk;
          } else if (typeof chunk === 'object' && chunk !== null && typeof chunk.usage === 'object') {
            usage = chunk.usage;
          } else {
            throw new AgentRouterError(500, 'bad_model_chunk', `Model ${model.name} yielded a ${typeof chunk} chunk; chunks must be strings`);
          }
        }
      } finally {
        // Without awaiting: a hung model's generator cannot return before its pending next().
        Promise.resolve(chunks.return?.()).catch(() => {});
      }
      cancel.throwIfAborted();
      const assistant: ChatMessage = usage === undefined
        ? { role: 'assistant', content: reply }
        : { role: 'assistant', content: reply, usage };
      await this.#commit([user, assistant], 1);
      completed = true;
    } finally {
      if (this.#pendingUser) {
        this.#pendingUser = false;
        if (this.#messages[this.#messages.length - 1] === user) this.#messages.pop();
      }
      watch.dispose();
      if (!completed && own) cancel.abort(new Error('turn ended before it completed'));
      await this.#end(session);
    }
  }

  async #turn<T>({ cancel, own }: { cancel: TurnCancel; own: boolean }, body: () => Promise<{ result: T; append: ChatMessage[] }>): Promise<T> {
    const session = await this.#begin(cancel);
    const watch = new AbortWatch(own ? undefined : cancel);
    const work = body();
    let settled = false;
    const markSettled = (): void => {
      settled = true;
    };
    work.then(markSettled, markSettled);
    try {
      const { result, append } = await watch.race(work);
      await this.#commit(append);
      return result;
    } finally {
      watch.dispose();
      if (!settled) this.#watchAbandoned(work);
      await this.#end(session);
    }
  }

  /** Counts an action that outlived its turn until it settles (whatever it does then is discarded). */
  #watchAbandoned(work: Promise<unknown>): void {
    this.#abandoned++;
    const settle = (): void => {
      this.#abandoned--;
    };
    work.then(settle, settle);
  }

  /** Waits for this agent's turn, then for the cross-process lock, then catches up with storage. */
  async #begin(cancel: TurnCancel): Promise<{ release: () => void; unlock: Unlock | undefined }> {
    cancel.throwIfAborted();
    // Free mailbox, loaded, in-process lock: the common case takes no promise and makes no signal.
    const release = this.#mailbox.tryAcquire() ?? (await this.#mailbox.acquire(cancel));
    let unlock: Unlock | undefined;
    try {
      if (!this.#loaded) await this.load();
      const storage = this.storage;
      unlock = storage.tryLock?.(this.id) ?? (await storage.lock?.(this.id, cancel.signal));
      await this.#refresh(false);
    } catch (error) {
      await unlock?.();
      release();
      throw error;
    }
    this.#inTurn = true;
    return { release, unlock };
  }

  async #end(session: { release: () => void; unlock: Unlock | undefined }): Promise<void> {
    this.#staged = undefined;
    this.#inTurn = false;
    try {
      await session.unlock?.();
    } finally {
      session.release();
    }
  }

  /** Stores the turn, then applies it here; `inPlace` leading messages of `append` are already in the history. */
  async #commit(append: ChatMessage[], inPlace = 0): Promise<void> {
    const state = this.#staged ?? this.#state;
    if (state === this.#state && append.length === 0) return;
    const expectedVersion = this.#version;
    const version = await this.storage.commit(this.id, { expectedVersion, state, append });
    this.#pendingUser = false;
    // A concurrent snapshot() may already have reloaded this very commit.
    if (this.#version !== expectedVersion) return;
    this.#state = state;
    for (let i = inPlace; i < append.length; i++) this.#messages.push(append[i] as ChatMessage);
    this.#version = version;
  }

  /** Reloads from storage when forced, or when storage holds a version this instance has not seen. */
  async #refresh(force: boolean): Promise<void> {
    if (!force) {
      const head = await this.storage.head?.(this.id);
      if (head === undefined || head <= this.#version) return;
    }
    const record = await this.storage.load(this.id);
    if (record === undefined || record.version <= this.#version) return;
    this.#state = record.state as S;
    this.#messages = record.messages;
    this.#version = record.version;
  }
}

function checkState(value: unknown, where: string): JsonObject {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new TypeError(`Agent ${where}: state must be a plain object, e.g. { count: 0 }`);
  }
  return value as JsonObject;
}
