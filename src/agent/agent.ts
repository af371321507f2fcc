import { AgentRouterError } from '../errors.ts';
import type { Model } from '../models/model.ts';
import { checkKnownOptions } from '../options.ts';
import { MemoryStorage } from '../storage/memory.ts';
import type { Storage } from '../storage/storage.ts';
import type { ChatMessage, JsonObject, JsonState } from '../types.ts';
import { TurnCancel } from '../lib/cancel.ts';
import { assertJson, assertJsonState } from '../lib/json.ts';
import { actionArguments, actionsOf, unknownMethod } from './actions.ts';
import { runChat, type ChatSink } from './chat-engine.ts';
import { ChatStream } from './chat-stream.ts';
import { AgentCore, checkState } from './core.ts';
import { toolsOf, type ToolDeclaration, type ToolOption, type ToolSet } from './tools.ts';
import { parseDecisions, pendingCalls, type ApprovalDecision } from './approvals.ts';
import type { ToolCall } from '../types.ts';
import { Turn, type StateUpdate } from './turn.ts';

export type { ChatSink } from './chat-engine.ts';
export type { StateUpdate } from './turn.ts';
export type { ApprovalDecision } from './approvals.ts';

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
  /** Tools of this agent beside its class's static `tools`, each with its own `run(args, ctx)`. */
  tools?: { readonly [name: string]: ToolOption } | undefined;
  /**
   * How many model steps one chat turn may take: a step that calls tools is
   * followed by another; a turn that would need more fails with `max_steps_exceeded`.
   * @defaultValue 8
   */
  maxSteps?: number | undefined;
}

const AGENT_OPTIONS: { readonly [K in keyof Required<AgentOptions>]: true } = {
  model: true, system: true, storage: true, initialState: true, lastMessages: true, tools: true, maxSteps: true,
};

export interface TurnOptions {
  /** Aborting it cancels the turn (the model call too); the turn then changes nothing. */
  signal?: AbortSignal | undefined;
}

/** How the router hands a turn its own cancel instead of a `signal`. @internal */
const turnCancel: unique symbol = Symbol('agent-router.turnCancel');

/** How the router hands a turn the id it already sent to the client. @internal */
const turnIdOf: unique symbol = Symbol('agent-router.turnId');

/** Turn options carrying the router's cancel, and the turn id the router made. @internal */
export function cancelledBy(cancel: TurnCancel, turnId?: string): TurnOptions {
  return { [turnCancel]: cancel, [turnIdOf]: turnId } as TurnOptions;
}

/** The router's chat turn: starts it now, reporting to a sink, and returns the Turn. @internal */
export const chatTurn: unique symbol = Symbol('agent-router.chatTurn');

/** The router's synchronous read of the committed state, when it can be told without storage. @internal */
export const committedState: unique symbol = Symbol('agent-router.committedState');

/** Resolves once the turns queued now have run: AgentServer's close() waits for it. @internal */
export const turnsDone: unique symbol = Symbol('agent-router.turnsDone');

/**
 * The router's one question: may it drive this agent's chat turns and state
 * reads itself, or does a subclass's own chat(), stream() or snapshot() have to run? @internal
 */
export const servesDirectly: unique symbol = Symbol('agent-router.servesDirectly');

const processStorage = new MemoryStorage();

/** Per class: whether it keeps Agent's own chat(), stream() and snapshot(). */
const ownMethods = new WeakMap<Function, boolean>();

/**
 * One conversational agent: an id, a model, persisted state and history.
 *
 * Turns (chat, stream, invoke, setState outside a turn) run one at a time in
 * arrival order. A turn that throws or is aborted leaves state and history as
 * they were; a turn that completes is written to storage as one commit.
 * docs/design.md describes the turn's life.
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
  /** Tools the model may call, by name; the method of the same name runs each with `(args, ctx)`. Not actions: `/invoke` cannot call them. */
  static tools: { readonly [name: string]: ToolDeclaration } | undefined;

  readonly id: string;
  model: Model | undefined;
  system: string | undefined;
  readonly storage: Storage;
  /** See {@link AgentOptions.lastMessages}; undefined sends the whole history. */
  readonly lastMessages: number | undefined;
  /** See {@link AgentOptions.maxSteps}. */
  readonly maxSteps: number;
  readonly #tools: ToolSet;
  readonly #core: AgentCore<S & JsonObject>;
  #messagesRead: { of: readonly ChatMessage[]; view: readonly ChatMessage[] } | undefined;

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
    const maxSteps = options.maxSteps ?? 8;
    if (!(Number.isSafeInteger(maxSteps) && maxSteps >= 1)) {
      throw new TypeError(`Agent: maxSteps must be a whole number >= 1 (the model steps one chat turn may take), got ${String(maxSteps)}`);
    }
    this.maxSteps = maxSteps;
    // Checked as JSON before the copy: structuredClone would keep a Date a Date, and every later setState would be refused for it.
    if (options.initialState !== undefined) assertJsonState(options.initialState, `Agent ${JSON.stringify(id)}: initialState`);
    const initialState = checkState(structuredClone(options.initialState ?? {}), 'initialState') as S & JsonObject;
    this.#core = new AgentCore(id, this.storage, initialState, () => this.load());
    actionsOf(this.constructor as typeof Agent);
    this.#tools = toolsOf(this.constructor, options.tools);
  }

  /**
   * The current state: a running turn's own changes included. Treat it as read-only; change it with setState.
   * After an action failed, it may show what the action changed in place until the next turn or snapshot().
   */
  get state(): S {
    return this.#core.state;
  }

  /** The committed history, oldest first: a frozen copy, as its messages are; read again unchanged, the same copy. */
  get messages(): readonly ChatMessage[] {
    const history = this.#core.sync.messages;
    const read = this.#messagesRead;
    // History only grows in place (a reload replaces the array): same array and length, same messages.
    if (read !== undefined && read.of === history && read.view.length === history.length) return read.view;
    const view = Object.freeze(history.slice());
    this.#messagesRead = { of: history, view };
    return view;
  }

  /**
   * The tool calls a paused turn waits on, from committed history as loaded
   * (after `snapshot()` or `load()`, what storage holds): decide them with approve().
   */
  get pendingApprovals(): readonly ToolCall[] {
    return pendingCalls(this.#core.sync.messages);
  }

  /** The version of the committed record (0 before the first commit). */
  get version(): number {
    return this.#core.sync.version;
  }

  /** True while a turn runs or waits. */
  get busy(): boolean {
    return this.#core.gate.size > 0;
  }

  /**
   * True while an action that was cut (timeout, abort) but ignored it is
   * still running. Such an instance refuses setState outside a turn, so the
   * abandoned action cannot change state later; a pool replaces it.
   */
  get abandoned(): boolean {
    return this.#core.gate.abandoned > 0;
  }

  /** Loads state and history from storage; the first call does the work, later calls share it. */
  load(): Promise<void> {
    // A field named initialState is set after the constructor made the state: it would be silently left out.
    if (Object.hasOwn(this, 'initialState')) {
      return Promise.reject(
        new TypeError(
          `Agent ${JSON.stringify(this.id)}: initialState is a class field here, set only after the constructor ran; pass it to the constructor instead: super(id, { initialState: {...} })`,
        ),
      );
    }
    return this.#core.sync.load();
  }

  /**
   * The committed state, never a running turn's half-done changes, and never
   * staler than storage: another process may have written a newer version.
   */
  async snapshot(): Promise<S> {
    const now = this[committedState]();
    if (now !== undefined) return now;
    await this.load();
    await this.#core.sync.refresh(false);
    return this.#core.sync.state;
  }

  /**
   * Merges into state, one level deep (`{...state, ...update}`). Inside an
   * action it joins the action's turn (as does any call made while an action
   * runs: the caller cannot be told apart); during a chat turn it is checked
   * at once and stored with that turn, or in a turn of its own right after
   * it if the turn stores nothing; otherwise it is a turn of its own.
   */
  async setState(update: StateUpdate<S>): Promise<S> {
    return this.#core.setState(update as StateUpdate<S & JsonObject>);
  }

  /** One chat turn; resolves with the whole reply. */
  chat(message: string, options: TurnOptions = {}): Promise<string> {
    if (typeof message !== 'string') return Promise.reject(new TypeError('Agent.chat: message must be a string'));
    return new Promise<string>((resolve, reject) => {
      this.#startChat(message, options, { done: resolve, failed: reject });
    });
  }

  /**
   * One chat turn, streamed: the reply's chunks as the model writes them.
   * Stopping the iteration early aborts the turn.
   */
  stream(message: string, options: TurnOptions = {}): AsyncIterable<string> {
    if (typeof message !== 'string') throw new TypeError('Agent.stream: message must be a string');
    return new ChatStream(this.id, (sink) => this.#startChat(message, options, sink));
  }

  /**
   * Resumes a paused turn as a new turn: approved calls run, refused ones go
   * to the model with the reason, and the model goes on; resolves with the reply, as chat() does.
   */
  approve(decisions: readonly ApprovalDecision[], options: TurnOptions = {}): Promise<string> {
    return new Promise<string>((resolve, reject) => {
      this.#startChat('', options, { done: resolve, failed: reject }, parseDecisions(decisions));
    });
  }

  /** Calls an action listed in the class's static `actions`, as one turn. */
  async invoke(method: string, params?: unknown, options: TurnOptions = {}): Promise<unknown> {
    const ctor = this.constructor as typeof Agent;
    if (!actionsOf(ctor).has(method)) throw unknownMethod(this.id, method);
    const action = (this as unknown as Record<string, (...args: unknown[]) => unknown>)[method] as (...args: unknown[]) => unknown;
    const args = actionArguments(params);
    return this.#core.runTurn(this.#newTurn('action', options), async () => {
      const result = await action.apply(this, args);
      // Checked inside the turn: a result no caller could be sent must not leave a committed change behind.
      assertJson(result, `Agent ${JSON.stringify(this.id)}: action ${method}'s result`);
      return result;
    });
  }

  /** See `chatTurn`. @internal */
  [chatTurn](message: string, options: TurnOptions, sink: ChatSink, decisions?: readonly ApprovalDecision[]): Turn<any> {
    return this.#startChat(message, options, sink, decisions);
  }

  /** See `committedState`. @internal */
  [committedState](): S | undefined {
    return this.#core.sync.committedNow();
  }

  /** See `turnsDone`. @internal */
  [turnsDone](): Promise<void> {
    return this.#core.gate.drained();
  }

  /** See `servesDirectly`. @internal */
  get [servesDirectly](): boolean {
    const ctor = this.constructor;
    let own = ownMethods.get(ctor);
    if (own === undefined) {
      own = this.chat === Agent.prototype.chat && this.stream === Agent.prototype.stream && this.snapshot === Agent.prototype.snapshot;
      ownMethods.set(ctor, own);
    }
    return own;
  }

  /** Starts a chat turn reporting to `sink`; a turn refused before it starts fails there too. */
  #startChat(message: string, options: TurnOptions, sink: ChatSink, decisions?: readonly ApprovalDecision[]): Turn<any> {
    const turn = this.#newTurn('chat', options);
    const model = this.model;
    if (model === undefined) {
      turn.fail();
      sink.failed(new AgentRouterError(500, 'no_model', `Agent ${JSON.stringify(this.id)} has no model; pass { model } to its constructor`));
      return turn;
    }
    const ask = { model, system: this.system, lastMessages: this.lastMessages, message, decisions, tools: this.#tools, maxSteps: this.maxSteps, instance: this };
    runChat(this.#core, turn, ask, sink);
    return turn;
  }

  /** A turn with the router's cancel, or one made here following the caller's signal. */
  #newTurn(kind: 'chat' | 'action', options: TurnOptions): Turn<S & JsonObject> {
    if (typeof options !== 'object' || options === null) throw new TypeError('Agent: turn options must be an object, e.g. { signal }');
    const given = (options as { [turnCancel]?: TurnCancel })[turnCancel];
    if (given !== undefined) return new Turn(kind, given, false, false, (options as { [turnIdOf]?: string })[turnIdOf]);
    return new Turn(kind, new TurnCancel(options.signal), true);
  }
}
