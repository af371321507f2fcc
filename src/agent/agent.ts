import { AgentRouterError, VersionConflictError } from '../errors.ts';
import { checkKnownOptions } from '../options.ts';
import type { Model, ModelChunk, ModelRequest } from '../models/model.ts';
import { MemoryStorage } from '../storage/memory.ts';
import { sameRecord } from '../storage/record-version.ts';
import type { Storage } from '../storage/storage.ts';
import type { ChatMessage, JsonObject, JsonState, TokenUsage } from '../types.ts';
import { AbortWatch } from '../lib/abort-watch.ts';
import { TurnCancel } from '../lib/cancel.ts';
import { Mailbox } from '../lib/mailbox.ts';
import { actionArguments, actionsOf, unknownMethod } from './actions.ts';
import { assertJson, assertJsonState } from '../lib/json.ts';

export interface AgentOptions<S extends JsonObject | JsonState<S> = JsonObject> {
  /** What writes the replies; `echoModel()` for an offline demo. */
  model?: Model | undefined;
  /** The system prompt, sent with every turn. */
  system?: string | undefined;
  /**
   * Where state and history persist.
   * @defaultValue one process-wide MemoryStorage, shared by id: two tests that each make `new Agent('bot')` share a record
   */
  storage?: Storage | undefined;
  /** State of an agent never stored before; copied, never shared between instances. */
  initialState?: S | undefined;
  /**
   * How many of the latest messages the model is sent with each turn, the
   * new one included; the window starts at a user message (a provider
   * refuses a conversation that opens with a reply). The whole history is
   * still kept and stored. Without it, a long conversation outgrows the
   * model's context window and every later turn fails.
   * @defaultValue all of them
   */
  lastMessages?: number | undefined;
}

const AGENT_OPTIONS: { readonly [K in keyof Required<AgentOptions>]: true } = { model: true, system: true, storage: true, initialState: true, lastMessages: true };

export interface TurnOptions {
  /** Aborting it cancels the turn (the model call too); the turn then changes nothing. */
  signal?: AbortSignal | undefined;
}

/**
 * The router's way to hand a turn its TurnCancel instead of a `signal`, so
 * that no AbortController is made unless something asks for a signal.
 * Internal: not exported from the package.
 * @internal
 */
export const turnCancel: unique symbol = Symbol('agent-router.turnCancel');

/** The internal push-style chat turn the router streams with; see `Agent[chatInto]`. @internal */
export const chatInto: unique symbol = Symbol('agent-router.chatInto');

/** The internal synchronous read of committed state the router answers GET state with; see `Agent[committedState]`. @internal */
export const committedState: unique symbol = Symbol('agent-router.committedState');

/** Resolves once the turns queued now have run: AgentServer's close() waits for it before dropping instances. @internal */
export const turnsDone: unique symbol = Symbol('agent-router.turnsDone');

const requestCancel = Symbol('agent-router.requestCancel');

/**
 * `signal` of every model request: made only if the model reads it (see
 * TurnCancel.signal), following the caller's signal if there is one, so
 * stopping a turn early still aborts the model. One accessor shared by all requests, defined on each as an own,
 * enumerable property (so `{...request}` in a wrapping model keeps it): a
 * getter written in the object literal costs a closure and ~0.3 µs per turn.
 */
const LAZY_SIGNAL: PropertyDescriptor = {
  get(this: { [requestCancel]: TurnCancel }): AbortSignal {
    return this[requestCancel].signal;
  },
  enumerable: true,
};

function modelRequest(system: string | undefined, messages: readonly ChatMessage[], cancel: TurnCancel): ModelRequest {
  const request = { system, messages, [requestCancel]: cancel };
  Object.defineProperty(request, 'signal', LAZY_SIGNAL);
  return request as unknown as ModelRequest;
}

/** Turn options carrying the router's cancel. */
export function cancelledBy(cancel: TurnCancel): TurnOptions {
  return { [turnCancel]: cancel } as TurnOptions;
}

/**
 * Where a push-style chat turn sends its reply (internal: chat(), the
 * router's SSE): chunk by chunk, then exactly one of done or failed. Called
 * as methods, so a class's instance can be the sink with no closures.
 */
export interface ChatSink {
  /** A chunk as the model wrote it; a promise to wait for before the next (backpressure). */
  chunk?(text: string): Promise<void> | undefined;
  /** The turn completed and was committed; `truncated` when the model said its provider cut the reply short. */
  done(reply: string, truncated: boolean): void;
  /** The turn failed or was cut; it changed nothing. */
  failed(error: unknown): void;
}

/** A turn's cancel, and who else may abort it. */
interface Cancellation {
  cancel: TurnCancel;
  /** Made for this turn, with no caller's signal to follow: nobody else can abort it, so nothing watches it. */
  own: boolean;
  /**
   * Made for this turn (not the router's): aborted at the turn's end if it did not complete, so a model
   * holding its signal stops (a stream's consumer that left its loop early, even with a caller's signal).
   */
  made: boolean;
}

/**
 * A turn's hold on the agent besides its mailbox (given back with
 * `#mailbox.release()`): its storage lock's release, sync or async.
 */
type Session = () => void | Promise<void>;

/** The Session of a storage with no lock. */
const NO_STORAGE_LOCK: Session = () => undefined;

/** A chat turn in progress: what chat() and stream() share. */
interface ChatTurn extends Cancellation {
  readonly session: Session;
  readonly model: Model;
  readonly request: ModelRequest;
  readonly user: ChatMessage;
  chunks: AsyncIterator<ModelChunk> | undefined;
  /** The model said it is done: its iterator needs no return(). */
  finished: boolean;
  /** The first chunk (one chunk needs no array); the whole reply once the turn completed. */
  text: string;
  /** Every chunk so far, from the second on; joined once at the end (see #completeChat). */
  parts: string[] | undefined;
  usage: TokenUsage | undefined;
  /** The model yielded `{truncated: true}`. */
  truncated: boolean;
  completed: boolean;
  /** #closeChat ran: the agent is given back, and the turn's end is not undone twice. */
  closed: boolean;
}

/**
 * A stream()'s turn as known outside its generator, which may stop running
 * for good between chunks: a consumer that neither pulls nor calls return().
 */
interface OpenStream {
  readonly agent: Agent;
  /** The turn, once it holds the agent and until the generator ends it. */
  turn: ChatTurn | undefined;
  /** Ends the turn when a caller's signal cuts it between chunks (see #cutStream). */
  cut: ((reason: unknown) => void) | undefined;
  /** The generator's race against that signal: its hook on the signal is taken off when the iterator is dropped. */
  watch: AbortWatch | undefined;
}

/** The turn's cancel: the router's, a caller's signal followed, or none (then `own` is made here). */
function cancelOf(options: TurnOptions): Cancellation {
  const given = (options as { [turnCancel]?: TurnCancel })[turnCancel];
  if (given !== undefined) return { cancel: given, own: false, made: false };
  return { cancel: new TurnCancel(options.signal), own: options.signal === undefined, made: true };
}

export type StateUpdate<S> = Partial<S> | ((state: S) => Partial<S>);

const processStorage = new MemoryStorage();

/** What an agent with no abandoned action waits on: one settled promise for all. */
const SETTLED: Promise<void> = Promise.resolve();

/**
 * One conversational agent: an id, a model, persisted state and history.
 *
 * Turns (chat, stream, invoke, setState outside a turn) run one at a time in
 * arrival order. A turn that throws or is aborted leaves state and history as
 * they were; a turn that completes is written to storage as one commit.
 *
 * @example
 * class Counter extends Agent<{ count: number }> {
 *   static override actions = ['increment'];
 *   constructor(id: string) { super(id, { model: echoModel(), initialState: { count: 0 } }); }
 *   async increment({ by = 1 } = {}) { await this.setState({ count: this.state.count + by }); return this.state.count; }
 * }
 */
export class Agent<S extends JsonObject | JsonState<S> = JsonObject> {
  /** Methods callable through `/invoke`; nothing else is. */
  static actions: readonly string[] = [];

  readonly id: string;
  model: Model | undefined;
  system: string | undefined;
  readonly storage: Storage;
  /** See {@link AgentOptions.lastMessages}; undefined sends the whole history. */
  readonly lastMessages: number | undefined;

  #state: S;
  /** The state an agent never stored starts from; again after its record was deleted from storage. */
  readonly #initialState: S;
  #messages: ChatMessage[] = [];
  /** What `messages` last returned, and of which history array: read again, unchanged, it is not copied again. */
  #messagesRead: { of: ChatMessage[]; view: readonly ChatMessage[] } | undefined;
  #version = 0;
  #loading: Promise<void> | undefined;
  #loaded = false;
  /** A commit was refused as stale (version_conflict): the next turn reloads whatever storage holds. */
  #stale = false;
  /**
   * A turn that ran an action failed (threw, was cut, could not commit):
   * the action may have changed the committed state in place
   * (`this.state.notes.push(x)`), before it failed or, cut, after. The state
   * is not frozen (changing it in place, then passing it to setState, is
   * common and must work), nor copied before each action (every successful
   * action would pay for it): the next turn and the next state read take it
   * again from storage first (see #restoreState), so the change never shows
   * nor is committed by a later turn.
   */
  #unsure = false;
  #staged: S | undefined;
  #inTurn = false;
  /** An action runs now: setState calls join its turn, and fail with it. */
  #inAction = false;
  /**
   * setState calls made from outside a running chat turn (a chat turn has no
   * code of the user's): staged into it, so one its model waits on (another
   * agent's action writing back) cannot deadlock, and applied in a turn of
   * their own if the chat turn stores nothing, so none is lost.
   */
  #carried: Array<StateUpdate<S>> | undefined;
  /** How many of #carried the commit under way holds. */
  #carriedInCommit = 0;
  /** The running turn stores carried updates (see #applyCarried). */
  #inCarriedTurn = false;
  /** The running chat turn's user message is the history's last entry, not yet committed. */
  #pendingUser = false;
  /** Actions cut at their turn's end that are still running. */
  #abandoned = 0;
  /** Settles once every abandoned action has (see #watchAbandoned). */
  #abandonedSettled: Promise<void> = SETTLED;
  readonly #mailbox = new Mailbox();

  constructor(id: string, options: AgentOptions<S> = {}) {
    if (typeof id !== 'string' || id.length === 0) {
      throw new TypeError('Agent: the first argument is the agent id, a non-empty string, e.g. new Agent("support-bot", { model })');
    }
    if (typeof options !== 'object' || options === null) {
      throw new TypeError('Agent: the second argument is an options object, e.g. { model: echoModel(), system: "..." }');
    }
    checkKnownOptions(options, AGENT_OPTIONS, 'Agent');
    const model = options.model;
    if (model !== undefined && (typeof model !== 'object' || model === null || typeof model.stream !== 'function')) {
      throw new TypeError('Agent: model must be a Model, an object with a stream(request) method, e.g. echoModel() or openAIModel({ model, apiKey })');
    }
    this.id = id;
    this.model = model;
    this.system = options.system;
    this.storage = options.storage ?? processStorage;
    const last = options.lastMessages;
    if (last !== undefined && !(Number.isSafeInteger(last) && last >= 1)) {
      throw new TypeError(`Agent: lastMessages must be a whole number >= 1 (the messages the model is sent each turn), got ${String(last)}`);
    }
    this.lastMessages = last;
    // Checked as JSON before the copy: structuredClone would keep a Date a Date, and every later setState would be refused for it.
    if (options.initialState !== undefined) assertJsonState(options.initialState, `Agent ${JSON.stringify(id)}: initialState`);
    // Two copies: what a deleted record starts over from must not share an object with the state a turn sees.
    this.#initialState = checkState(structuredClone(options.initialState ?? {}), 'initialState') as S;
    this.#state = structuredClone(this.#initialState);
    actionsOf(this.constructor as typeof Agent);
  }

  /**
   * The current state: a running turn's own changes included. Treat it as read-only; change it with setState.
   * After an action failed, it may show what the action changed in place until the next turn or snapshot().
   */
  get state(): S {
    return this.#staged ?? this.#state;
  }

  /**
   * The committed history, oldest first: a frozen copy, as its messages are.
   * The history itself is the array each turn pushes onto and sends the
   * model: handed out, a `messages.pop()` meant to read the last reply took
   * it out of every later turn's request, though storage still held it.
   */
  get messages(): readonly ChatMessage[] {
    const history = this.#messages;
    const length = this.#pendingUser ? history.length - 1 : history.length;
    // Its committed part only grows in place (a reload replaces the array): same array, same length, same messages.
    const read = this.#messagesRead;
    if (read !== undefined && read.of === history && read.view.length === length) return read.view;
    const view = Object.freeze(history.slice(0, length));
    this.#messagesRead = { of: history, view };
    return view;
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
    // Every first turn and read comes here. Unlike model and system, which are read at each turn, a field
    // named initialState is set after the constructor made the state: it was silently left out (then a
    // `this.state.count + 1` stored NaN, reported as the action's result not being JSON).
    if (Object.hasOwn(this, 'initialState')) {
      return Promise.reject(
        new TypeError(
          `Agent ${JSON.stringify(this.id)}: initialState is a class field here, set only after the constructor ran; pass it to the constructor instead: super(id, { initialState: {...} })`,
        ),
      );
    }
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
    const now = this[committedState]();
    if (now !== undefined) return now;
    await this.load();
    await this.#refresh(false);
    return this.#state;
  }

  /**
   * Resolves once every turn queued now has run, the mailbox taken last and
   * given back at once. A failed chat's carried updates are such a turn,
   * started after the chat was answered: a server closing must not drop it.
   * @internal
   */
  [turnsDone](): Promise<void> {
    return this.#mailbox.acquire().then(() => this.#mailbox.release());
  }

  /**
   * Internal (the router's GET state): the committed state when it can be
   * told without waiting (history loaded, an in-process storage holding
   * nothing newer), else undefined; then snapshot() asks storage.
   * @internal
   */
  [committedState](): S | undefined {
    const sync = this.storage.sync;
    return this.#loaded && !this.#unsure && sync !== undefined && sync.head(this.id) === this.#version ? this.#state : undefined;
  }

  /**
   * True while an action that was cut (timeout, abort) but ignored it is
   * still running. Such an instance refuses setState outside a turn, so the
   * abandoned action cannot change state later; a pool replaces it.
   */
  get abandoned(): boolean {
    return this.#abandoned > 0;
  }

  /**
   * Merges into state, one level deep (`{...state, ...update}`). Inside an action it joins the action's turn (as does
   * any call made while an action runs: the caller cannot be told apart);
   * during a chat turn it is checked at once and stored with that turn, or
   * in a turn of its own right after it (ahead of the turns waiting) if the
   * turn stores nothing; otherwise it is a turn of its own.
   */
  async setState(update: StateUpdate<S>): Promise<S> {
    // A carried turn runs no user code that could be waiting on this call: it queues as a turn of its own,
    // so its caller's next request comes after it (carried, it would have gone behind that request).
    if (this.#inTurn && !this.#inCarriedTurn) {
      if (this.#inAction) return this.#stage(update);
      // From outside the turn: checked as JSON now, so a bad update is refused to its caller instead of
      // failing the turn it joins (or being applied later), and carried only once it was taken.
      const state = this.#merged(update);
      assertJsonState(state, `Agent ${JSON.stringify(this.id)}: state`);
      this.#staged = state;
      (this.#carried ??= []).push(update);
      return state;
    }
    if (this.#abandoned > 0) {
      throw new AgentRouterError(409, 'turn_ended', `Agent ${JSON.stringify(this.id)}: setState from an action whose turn was already cut`);
    }
    return this.#turn({ cancel: new TurnCancel(), own: true, made: true }, async () => ({ result: this.#stage(update), append: [] }));
  }

  /** One chat turn; resolves with the whole reply. */
  chat(message: string, options: TurnOptions = {}): Promise<string> {
    if (typeof message !== 'string') return Promise.reject(new TypeError('Agent.chat: message must be a string'));
    // The executor's throw (a bad `options`) rejects the promise.
    return new Promise<string>((resolve, reject) => this.#pushChat(message, cancelOf(options), { done: resolve, failed: reject }));
  }

  /**
   * Internal (the router's SSE path): one chat turn that hands each chunk to
   * `sink.chunk` as the model writes it, waiting for what that returns
   * (backpressure), and ends with exactly one call of `sink.done` or
   * `sink.failed`.
   * @internal
   */
  [chatInto](message: string, options: TurnOptions, sink: ChatSink): void {
    this.#pushChat(message, cancelOf(options), sink);
  }

  /**
   * stream()'s turn, pushing chunks to a sink instead of yielding them, and
   * driven by callbacks rather than an async function or a promise of its
   * own: a turn waiting on its model (a stream held open) keeps one promise
   * reaction and this turn's closures, nothing per layer above it.
   */
  #pushChat(message: string, cancellation: Cancellation, sink: ChatSink): void {
    let model: Model;
    let session: Session | undefined;
    try {
      model = this.#modelOrThrow();
      session = this.#beginNow(cancellation.cancel);
    } catch (error) {
      return sink.failed(error);
    }
    if (session !== undefined) return this.#runChat(model, message, cancellation, session, sink);
    this.#begin(cancellation.cancel).then(
      (begun) => this.#runChat(model, message, cancellation, begun, sink),
      (error: unknown) => sink.failed(error),
    );
  }

  /**
   * The chat turn once it holds the agent: model chunks in, `sink.chunk`
   * out, one commit at the end. Never throws.
   *
   * The callbacks are closures over this call, not fields of the turn
   * record: measured under JSON chat load, a turn record pointing at the
   * sink and at its callbacks made the young generation promote about three
   * times as much (a turn record that lives through a scavenge then holds
   * the request's newer objects), 10-20% more CPU per request.
   */
  #runChat(model: Model, message: string, cancellation: Cancellation, session: Session, sink: ChatSink): void {
    let turn: ChatTurn;
    try {
      turn = this.#openChat(model, message, cancellation, session);
    } catch (error) {
      return this.#endAfterFailure(session, error, sink);
    }
    // Three closures (what the model's promises and the cancel call back into); pulling and ending are methods taking them.
    let ended = false;
    const fail = (error: unknown): void => {
      if (ended) return;
      ended = true;
      this.#endChat(turn, sink, fail, true, error);
    };
    const succeed = (): void => {
      if (ended) return;
      ended = true;
      this.#endChat(turn, sink, fail, false, undefined);
    };
    const onNext = (next: IteratorResult<ModelChunk>): void => {
      // A late chunk from a model that ignored its signal, after the turn was cut.
      if (ended) return;
      try {
        if (next.done === true) {
          turn.finished = true;
          // From here the turn's outcome is its commit's: cut now, it could be stored and yet reported
          // failed (and its user message dropped from this instance's history). #completeChat still
          // refuses a turn cut before the commit begins.
          if (!turn.own) turn.cancel.offAbort(fail);
          const storing = this.#completeChat(turn);
          if (storing === undefined) succeed();
          else storing.then(succeed, fail);
          return;
        }
        const chunk = this.#take(turn, next.value);
        const waiting = chunk === undefined || sink.chunk === undefined ? undefined : sink.chunk(chunk);
        if (waiting === undefined) this.#pullChat(turn, onNext, fail);
        else waiting.then(() => ended || this.#pullChat(turn, onNext, fail), fail);
      } catch (error) {
        fail(error);
      }
    };
    const cancel = turn.cancel;
    if (cancel.aborted) return fail(cancel.reason);
    // Wakes the turn when cut (the hook gets the reason), so a model that ignores its signal cannot hold it.
    // A cancel made here is aborted only at the turn's end: nothing to watch for.
    if (!turn.own) cancel.onAbort(fail);
    try {
      turn.chunks = model.stream(turn.request)[Symbol.asyncIterator]();
    } catch (error) {
      return fail(error);
    }
    this.#pullChat(turn, onNext, fail);
  }

  /** Asks the model for its next chunk. */
  #pullChat(turn: ChatTurn, onNext: (next: IteratorResult<ModelChunk>) => void, fail: (error: unknown) => void): void {
    try {
      const next = (turn.chunks as AsyncIterator<ModelChunk>).next();
      (next instanceof Promise ? next : Promise.resolve(next)).then(onNext, fail);
    } catch (error) {
      fail(error);
    }
  }

  /** Ends a push turn (once: the caller's closures see to it), then tells the sink; an incomplete turn leaves no trace. */
  #endChat(turn: ChatTurn, sink: ChatSink, hook: (reason: unknown) => void, failed: boolean, error: unknown): void {
    if (!turn.own) turn.cancel.offAbort(hook);
    let ending: Promise<void> | undefined;
    try {
      ending = this.#closeChat(turn);
    } catch (closeError) {
      return sink.failed(closeError);
    }
    if (ending === undefined) return failed ? sink.failed(error) : sink.done(turn.text, turn.truncated);
    ending.then(() => (failed ? sink.failed(error) : sink.done(turn.text, turn.truncated)), (closeError: unknown) => sink.failed(closeError));
  }

  /** Gives the agent back after a turn failed before it began, then reports the failure. */
  #endAfterFailure(session: Session, error: unknown, sink: ChatSink): void {
    let ending: Promise<void> | undefined;
    try {
      ending = this.#end(session);
    } catch {
      // The turn's own failure is the one to report.
    }
    if (ending === undefined) return sink.failed(error);
    ending.then(() => sink.failed(error), () => sink.failed(error));
  }

  /**
   * One chat turn, streamed: the reply's chunks as the model writes them.
   * Stopping the iteration early aborts the turn.
   */
  stream(message: string, options: TurnOptions = {}): AsyncIterable<string> {
    if (typeof message !== 'string') throw new TypeError('Agent.stream: message must be a string');
    const open: OpenStream = { agent: this as unknown as Agent, turn: undefined, cut: undefined, watch: undefined };
    const iterator = this.#streamTurn(message, cancelOf(options), open);
    Agent.#droppedStreams.register(iterator, open, open);
    return iterator;
  }

  /**
   * Ends the turn of a stream() iterator dropped unfinished without return()
   * (which a `for await` loop calls when left early), once the garbage
   * collector has taken it: until then it holds the agent, as an unclosed
   * file handle holds its file, and nothing else can tell it was dropped.
   */
  static readonly #droppedStreams = new FinalizationRegistry<OpenStream>((open) => open.agent.#dropStream(open));

  /**
   * What ends a stream's turn when it is cut (a caller's signal, the
   * router's timeout) while its consumer is not pulling: at once, as a chat
   * turn's, not at the consumer's next pull, which may never come. From the
   * model's last chunk on, the outcome is the commit's (see #runChat).
   * Made here, not in the generator: nothing it keeps may keep the generator.
   */
  #cutStream(open: OpenStream): (reason: unknown) => void {
    return () => {
      const turn = open.turn;
      if (turn === undefined || turn.finished) return;
      try {
        this.#closeChat(turn)?.catch(() => {});
      } catch {
        // The consumer's next pull reports the cut.
      }
    };
  }

  #dropStream(open: OpenStream): void {
    const turn = open.turn;
    if (turn === undefined || turn.closed) return;
    if (open.cut !== undefined) turn.cancel.offAbort(open.cut);
    open.watch?.dispose();
    process.emitWarning(
      `Agent ${JSON.stringify(this.id)}: a stream() iterator was dropped unfinished without return() (leave a for await loop with break, or call return()); its turn held the agent until the garbage collector took the iterator, and was not stored`,
      { type: 'AgentRouterWarning', code: 'dropped_stream' },
    );
    try {
      this.#closeChat(turn)?.catch(() => {});
    } catch {
      // Nobody is left to tell; the agent's next turn meets a failing storage too.
    }
  }

  /** Calls an action listed in the class's static `actions`, as one turn. */
  async invoke(method: string, params?: unknown, options: TurnOptions = {}): Promise<unknown> {
    const ctor = this.constructor as typeof Agent;
    if (!actionsOf(ctor).has(method)) throw unknownMethod(this.id, method);
    const action = (this as unknown as Record<string, (...args: unknown[]) => unknown>)[method] as (...args: unknown[]) => unknown;
    const args = actionArguments(params);
    return this.#turn(cancelOf(options), async () => {
      this.#inAction = true;
      try {
        const result = await action.apply(this, args);
        // Checked inside the turn: a result no caller could be sent must not leave a committed change behind.
        assertJson(result, `Agent ${JSON.stringify(this.id)}: action ${method}'s result`);
        return { result, append: [] };
      } finally {
        this.#inAction = false;
      }
    });
  }

  #stage(update: StateUpdate<S>): S {
    this.#staged = this.#merged(update);
    return this.#staged;
  }

  /**
   * The state with `update` merged in, from the current one (a running turn's changes included).
   * A function is given a copy, and what it returns is merged onto that copy: one that changes the
   * state it is given and then throws (or whose turn then fails) leaves the state as it was.
   */
  #merged(update: StateUpdate<S>): S {
    if (typeof update !== 'function') return { ...this.state, ...checkState(update, 'setState') } as S;
    // Checked first: an action may have staged what is not JSON, which the copy would turn into a plain
    // object (a class instance, then let through) or refuse with its own error (a function).
    assertJsonState(this.state, `Agent ${JSON.stringify(this.id)}: state`);
    const current = structuredClone(this.state);
    const changes = update(current);
    if (changes === undefined) {
      throw new TypeError(
        'Agent setState: the update function returned undefined; return the fields to change, e.g. setState((s) => ({ count: s.count + 1 })); the state it is given is a copy, so changing it changes nothing',
      );
    }
    return { ...current, ...checkState(changes, 'setState') } as S;
  }

  async *#streamTurn(message: string, cancellation: Cancellation, open: OpenStream): AsyncGenerator<string> {
    const model = this.#modelOrThrow();
    const session = this.#beginNow(cancellation.cancel) ?? (await this.#begin(cancellation.cancel));
    const turn = (open.turn = this.#openChat(model, message, cancellation, session));
    // A cancel made here is aborted only at the turn's end: nothing to watch for.
    const watch = (open.watch = new AbortWatch(cancellation.own ? undefined : cancellation.cancel));
    if (!cancellation.own) cancellation.cancel.onAbort((open.cut = this.#cutStream(open)));
    try {
      const chunks = (turn.chunks = model.stream(turn.request)[Symbol.asyncIterator]());
      let next: IteratorResult<ModelChunk>;
      // Raced, not `for await`: a model that ignores its signal must not hold the turn.
      while (!(next = await watch.race(chunks.next())).done) {
        const chunk = this.#take(turn, next.value);
        if (chunk !== undefined) yield chunk;
      }
      turn.finished = true;
      const storing = this.#completeChat(turn);
      if (storing !== undefined) await storing;
    } finally {
      watch.dispose();
      if (open.cut !== undefined) turn.cancel.offAbort(open.cut);
      open.turn = undefined;
      open.watch = undefined;
      Agent.#droppedStreams.unregister(open);
      const ending = this.#closeChat(turn);
      if (ending !== undefined) await ending;
    }
  }

  #modelOrThrow(): Model {
    if (this.model !== undefined) return this.model;
    throw new AgentRouterError(500, 'no_model', `Agent ${JSON.stringify(this.id)} has no model; pass { model } to its constructor`);
  }

  /** A chat turn's start, once it holds the agent: the new message pushed onto the history. */
  #openChat(model: Model, message: string, { cancel, own, made }: Cancellation, session: Session): ChatTurn {
    // Frozen, as every message the agent writes: MemoryStorage can then keep it as it is instead of a copy.
    const user: ChatMessage = Object.freeze({ role: 'user', content: message });
    // The history with the new message last. Pushed in place, taken back in
    // #closeChat if the turn does not complete. A first turn starts an array
    // of exactly one (pushing onto an empty one reserves 17 slots).
    let history = this.#messages;
    if (history.length === 0) history = this.#messages = [user];
    else history.push(user);
    this.#pendingUser = true;
    const request = modelRequest(this.system, this.#window(history), cancel);
    return {
      session, cancel, own, made, model, request, user,
      chunks: undefined, finished: false, text: '', parts: undefined, usage: undefined, truncated: false, completed: false, closed: false,
    };
  }

  /**
   * The latest `lastMessages` of the history, from a user message on: what
   * the model is sent. Always a copy, never the history itself: a model (or
   * a wrapper) that pushes onto its request's messages, or splices them,
   * changes its own array only. The messages in it are frozen (see
   * #openChat, #completeChat, frozenMessage). The copy grows with the
   * history, unlike the rest of a turn: ~0.5 ns a message at 1,000, more
   * past that, as its garbage adds up (a model reading only the last
   * message: +14 us a turn at 10,000, +355 us at 50,000, the copy then
   * being a large object). A read-only Proxy of the history costs nothing
   * here, but made each read of it several times slower: a model mapping
   * every message, as openAIModel does, took 2.5 to 4.5 times as long a
   * turn at 1,000 to 50,000 messages; lastMessages bounds both.
   */
  #window(history: ChatMessage[]): ChatMessage[] {
    const last = this.lastMessages;
    if (last === undefined || history.length <= last) return history.slice();
    let start = history.length - last;
    while (start < history.length - 1 && (history[start] as ChatMessage).role !== 'user') start++;
    return history.slice(start);
  }

  /** Checks one model chunk; returns the text to pass on, if any (kept in the reply). */
  #take(turn: ChatTurn, chunk: ModelChunk): string | undefined {
    turn.cancel.throwIfAborted();
    if (typeof chunk === 'string') {
      if (chunk.length === 0) return undefined;
      if (turn.parts !== undefined) turn.parts.push(chunk);
      else if (turn.text === '') turn.text = chunk;
      else turn.parts = [turn.text, chunk];
      return chunk;
    }
    if (typeof chunk === 'object' && chunk !== null) {
      // A record: usage, the truncated mark, or both in one.
      const { usage, truncated } = chunk as { usage?: unknown; truncated?: unknown };
      // `usage: null` is a provider's "none" (OpenAI's chunks carry it until the last): no usage, not `{}` in history.
      if (typeof usage === 'object' && usage !== null) turn.usage = usage as TokenUsage;
      if (truncated === true) turn.truncated = true;
      if (typeof usage === 'object' || typeof truncated === 'boolean') return undefined;
    }
    throw new AgentRouterError(
      500,
      'bad_model_chunk',
      `Model ${turn.model.name} yielded a ${chunk === null ? 'null' : typeof chunk} chunk; chunks must be strings, {usage} or {truncated}`,
    );
  }

  /** Commits the reply; a promise only when the storage answers asynchronously. */
  #completeChat(turn: ChatTurn): Promise<void> | undefined {
    turn.cancel.throwIfAborted();
    // Joined, not concatenated chunk by chunk: `+=` builds a tree of one string node per chunk,
    // and history keeps the reply for the agent's lifetime. Measured on 64-chunk SSE turns, the
    // join took 11% off a request's CPU, most of it garbage collection.
    const reply = turn.parts === undefined ? turn.text : turn.parts.join('');
    turn.text = reply;
    const usage = turn.usage;
    const assistant: ChatMessage =
      usage === undefined ? { role: 'assistant', content: reply } : { role: 'assistant', content: reply, usage: Object.freeze({ ...usage }) };
    if (turn.truncated) assistant.truncated = true;
    Object.freeze(assistant);
    const storing = this.#commit([turn.user, assistant], 1);
    if (storing === undefined) {
      turn.completed = true;
      return undefined;
    }
    return storing.then(() => {
      turn.completed = true;
    });
  }

  /** Ends a chat turn, completed or not: an incomplete one leaves no trace. */
  #closeChat(turn: ChatTurn): Promise<void> | undefined {
    if (turn.closed) return undefined;
    turn.closed = true;
    // Without awaiting: a hung model's generator cannot return before its pending next().
    if (turn.chunks !== undefined && !turn.finished) Promise.resolve(turn.chunks.return?.()).catch(() => {});
    if (this.#pendingUser) {
      this.#pendingUser = false;
      if (this.#messages[this.#messages.length - 1] === turn.user) this.#messages.pop();
    }
    if (!turn.completed && turn.made) turn.cancel.abort(new Error('turn ended before it completed'));
    return this.#end(turn.session);
  }

  async #turn<T>({ cancel, own }: Cancellation, body: () => Promise<{ result: T; append: ChatMessage[] }>, first = false): Promise<T> {
    const session = this.#beginNow(cancel) ?? (await this.#begin(cancel, first));
    const watch = new AbortWatch(own ? undefined : cancel);
    const work = body();
    let settled = false;
    const markSettled = (): void => {
      settled = true;
    };
    work.then(markSettled, markSettled);
    try {
      const { result, append } = await watch.race(work);
      const storing = this.#commit(append);
      if (storing !== undefined) await storing;
      return result;
    } catch (error) {
      // Set before #end gives the agent back, so that no turn or read meets the state as the action left it.
      this.#unsure = true;
      throw error;
    } finally {
      watch.dispose();
      if (!settled) this.#watchAbandoned(work);
      const ending = this.#end(session);
      if (ending !== undefined) await ending;
    }
  }

  /**
   * Counts an action that outlived its turn until it settles (whatever it
   * does then is discarded). No turn begins meanwhile (see #begin): the
   * action's setState would join that turn, and be committed with it.
   */
  #watchAbandoned(work: Promise<unknown>): void {
    this.#abandoned++;
    const settle = (): void => {
      // Back to a settled promise, so an instance cut many times keeps no chain of them.
      if (--this.#abandoned === 0) this.#abandonedSettled = SETTLED;
    };
    const settled = work.then(settle, settle);
    this.#abandonedSettled = Promise.all([this.#abandonedSettled, settled]).then(() => undefined);
  }

  /**
   * Takes the turn at once when nothing needs waiting for: a free mailbox,
   * history loaded, an in-process storage whose lock is free and which holds
   * nothing newer. Undefined otherwise (then #begin waits).
   */
  #beginNow(cancel: TurnCancel): Session | undefined {
    const sync = this.storage.sync;
    if (!this.#loaded || sync === undefined || this.#abandoned > 0 || this.#stale || this.#unsure) return undefined;
    cancel.throwIfAborted();
    if (!this.#mailbox.tryAcquire()) return undefined;
    const unlock = sync.tryLock(this.id);
    if (unlock === undefined || sync.head(this.id) !== this.#version) {
      unlock?.();
      this.#mailbox.release();
      return undefined;
    }
    this.#inTurn = true;
    return unlock;
  }

  /**
   * Waits for this agent's turn, then for any cut action still running to
   * end, then for the cross-process lock, then catches up with storage.
   */
  async #begin(cancel: TurnCancel, first = false): Promise<Session> {
    cancel.throwIfAborted();
    if (!this.#mailbox.tryAcquire()) await this.#mailbox.acquire(cancel, first);
    let unlock: Session | undefined;
    try {
      if (this.#abandoned > 0) await this.#abandonedToSettle(cancel);
      if (!this.#loaded) await this.#loadUnlessCut(cancel);
      const storage = this.storage;
      unlock = storage.sync?.tryLock(this.id) ?? (await storage.lock?.(this.id, cancel.signal));
      await this.#refresh(false);
    } catch (error) {
      await unlock?.();
      this.#mailbox.release();
      throw error;
    }
    this.#inTurn = true;
    return unlock ?? NO_STORAGE_LOCK;
  }

  /**
   * The first load, given up when the turn is cut: a storage that cannot reach
   * its server (a Redis client queueing commands until it reconnects, a pool
   * waiting for a connection) may not answer for a long time, and the turn's
   * answer waits on it. The load goes on, shared with whoever asks next.
   */
  async #loadUnlessCut(cancel: TurnCancel): Promise<void> {
    const watch = new AbortWatch(cancel);
    try {
      await watch.race(this.load());
    } finally {
      watch.dispose();
    }
  }

  /** Resolves once no abandoned action runs; rejects if `cancel` aborts first. */
  async #abandonedToSettle(cancel: TurnCancel): Promise<void> {
    const watch = new AbortWatch(cancel);
    try {
      while (this.#abandoned > 0) await watch.race(this.#abandonedSettled);
    } finally {
      watch.dispose();
    }
  }

  /** Ends the turn; a promise only when a storage lock is released asynchronously. */
  #end(unlock: Session): Promise<void> | undefined {
    this.#staged = undefined;
    this.#inTurn = false;
    this.#inCarriedTurn = false;
    const carried = this.#carried;
    if (carried !== undefined) {
      this.#carried = undefined;
      this.#applyCarried(carried);
    }
    let unlocking: void | Promise<void>;
    try {
      unlocking = unlock();
    } catch (error) {
      this.#mailbox.release();
      throw error;
    }
    if (unlocking === undefined) {
      this.#mailbox.release();
      return undefined;
    }
    return Promise.resolve(unlocking).finally(() => this.#mailbox.release());
  }

  /**
   * The outside setState calls a chat turn did not store (it failed, or they
   * came during its commit), as a turn of their own right after it: ahead of
   * the turns already waiting (`first`), which came later and must see them,
   * and after the chat turn's own answer, which does not wait for them. It
   * reloads from storage first, as every turn does. Calls made while it runs
   * are turns of their own (see setState), so a steady stream of them cannot
   * keep it at the head. Each update is applied on its own, in order: one
   * that throws now (a function meeting the state without the failed turn's
   * changes) is left out, not the others. Their callers had their answer
   * already; a failure to store is the storage's, and the next turn meets it
   * too.
   */
  #applyCarried(updates: Array<StateUpdate<S>>): void {
    this.#turn({ cancel: new TurnCancel(), own: true, made: true }, async () => {
      this.#inCarriedTurn = true;
      for (const update of updates) {
        try {
          const next = this.#merged(update);
          assertJsonState(next, `Agent ${JSON.stringify(this.id)}: state`);
          this.#staged = next;
        } catch {
          // left out, see above
        }
      }
      return { result: this.state, append: [] };
    }, true).catch(() => {});
  }

  /**
   * Stores the turn, then applies it here; `inPlace` leading messages of
   * `append` are already in the history. A promise only when the storage
   * answers asynchronously.
   */
  #commit(append: ChatMessage[], inPlace = 0): Promise<void> | undefined {
    const state = this.#staged ?? this.#state;
    this.#carriedInCommit = this.#carried?.length ?? 0;
    if (state === this.#state && append.length === 0) return undefined;
    if (state !== this.#state) assertJsonState(state, `Agent ${JSON.stringify(this.id)}: state`);
    const expectedVersion = this.#version;
    // S is JSON by its bound and by assertJsonState; the bound is structural, so it takes the cast.
    const turn = { expectedVersion, state: state as JsonObject, append };
    const sync = this.storage.sync;
    if (sync !== undefined) {
      let version: number;
      try {
        version = sync.commit(this.id, turn);
      } catch (error) {
        this.#noteConflict(error);
        throw error;
      }
      this.#apply(expectedVersion, state, append, inPlace, version);
      return undefined;
    }
    return this.storage.commit(this.id, turn).then(
      (version) => this.#apply(expectedVersion, state, append, inPlace, version),
      (error: unknown) => {
        this.#noteConflict(error);
        throw error;
      },
    );
  }

  /** A refused commit means this instance is behind (or ahead of) storage: the next turn reloads, so one 409 is not followed by more. */
  #noteConflict(error: unknown): void {
    if (error instanceof VersionConflictError) this.#stale = true;
  }

  #apply(expectedVersion: number, state: S, append: ChatMessage[], inPlace: number, version: number): void {
    this.#pendingUser = false;
    if (this.#carried !== undefined) this.#carried = this.#carried.length > this.#carriedInCommit ? this.#carried.slice(this.#carriedInCommit) : undefined;
    // A concurrent snapshot() may already have reloaded this very commit.
    if (this.#version !== expectedVersion) return;
    this.#state = state;
    for (let i = inPlace; i < append.length; i++) this.#messages.push(append[i] as ChatMessage);
    this.#version = version;
  }

  /**
   * Reloads from storage when forced, or when storage holds another version
   * than this instance: a newer one (another process wrote), an older one or
   * none (the record was deleted or restored), or any after a refused commit.
   */
  async #refresh(force: boolean): Promise<void> {
    if (this.#unsure && !force && !this.#stale && (await this.#restoreState())) return;
    const storage = this.storage;
    // Taken as storage has it, even older than this instance's: nothing here is newer than what storage holds.
    let takeAny = force || this.#stale;
    if (!takeAny) {
      const sync = storage.sync;
      const head = sync !== undefined ? sync.head(this.id) : await storage.head?.(this.id);
      if (head === undefined || head === this.#version) return;
      // Older, or another record: deleted and made again since this instance read it (record-version.ts).
      takeAny = head < this.#version || (head !== 0 && this.#version !== 0 && !sameRecord(head, this.#version));
      // Only the turns this instance missed, when it has a history to extend and no turn half-way.
      if (!takeAny && storage.loadSince !== undefined && this.#version > 0 && !this.#pendingUser) {
        const known = { version: this.#version, messages: this.#messages.length };
        const tail = await storage.loadSince(this.id, known);
        if (tail === undefined || !sameRecord(tail.version, known.version)) {
          // Deleted, or deleted and made again, since the head was read: not a tail of this history.
          takeAny = true;
        } else {
          if (tail.version <= this.#version) return;
          if (this.#version === known.version && this.#messages.length === known.messages) {
            this.#state = tail.state as S;
            for (const message of tail.messages) this.#messages.push(frozenMessage(message));
            this.#version = tail.version;
            return;
          }
          // Something else moved this instance on meanwhile: its history is no longer `known`.
        }
      }
    }
    const record = await storage.load(this.id);
    if (takeAny) {
      this.#stale = false;
      const unsure = this.#unsure;
      // The state is taken from storage below, whatever it holds: trusted again, unless a cut action still runs.
      if (this.#abandoned === 0) this.#unsure = false;
      if (record === undefined) {
        // Deleted: this instance starts over, as a new one would; never stored, from its initial state again after a failed action.
        if (this.#version !== 0 || unsure) {
          this.#state = structuredClone(this.#initialState);
          this.#messages = [];
          this.#version = 0;
        }
        return;
      }
    } else if (record === undefined || (record.version <= this.#version && sameRecord(record.version, this.#version))) {
      return;
    }
    this.#state = record.state as S;
    // A new array (the storage's own is not pushed onto) of frozen messages, as those the agent writes.
    this.#messages = record.messages.map(frozenMessage);
    this.#version = record.version;
  }

  /**
   * After a failed action (see #unsure): the committed state again, as
   * storage holds it; no user code can change the history, which is kept.
   * Read with loadSince where the storage has it, which then sends the state
   * alone. False when storage holds another record or version than this
   * instance: then #stale is set, and the caller reloads the whole record.
   */
  async #restoreState(): Promise<boolean> {
    const version = this.#version;
    const storage = this.storage;
    const known = { version, messages: this.#pendingUser ? this.#messages.length - 1 : this.#messages.length };
    const record = version > 0 && storage.loadSince !== undefined ? await storage.loadSince(this.id, known) : await storage.load(this.id);
    // Another read (a turn's, a state read's) restored it meanwhile; taken again now, it could undo a running turn's in-place change.
    if (!this.#unsure) return true;
    if (this.#version !== version || (record === undefined ? version !== 0 : record.version !== version)) {
      this.#stale = true;
      return false;
    }
    // Storage keeps its own copy of what it was given (MemoryStorage copies on commit and on read): nothing the action changed.
    this.#state = record === undefined ? structuredClone(this.#initialState) : (record.state as S);
    if (this.#abandoned === 0) this.#unsure = false;
    return true;
  }
}

/**
 * A message read from storage as history keeps it: frozen, as every message
 * the agent writes, so a model cannot rewrite a message in the history it is
 * sent. Each is frozen once, as it enters the history.
 */
function frozenMessage(message: ChatMessage): ChatMessage {
  if (message.usage !== undefined) Object.freeze(message.usage);
  return Object.freeze(message);
}

function checkState(value: unknown, where: string): JsonObject {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new TypeError(`Agent ${where}: state must be a plain object, e.g. { count: 0 }`);
  }
  // Spread, a promise adds nothing: an async update function would change nothing and report success.
  if (typeof (value as { then?: unknown }).then === 'function') {
    throw new TypeError(`Agent ${where}: got a promise (an async function?); compute the update first, then pass it: setState(await compute())`);
  }
  return value as JsonObject;
}
