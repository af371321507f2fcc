import { AgentRouterError } from '../errors.ts';
import type { Model, ModelChunk, ModelRequest } from '../models/model.ts';
import type { ChatMessage, JsonObject, TokenUsage } from '../types.ts';
import type { AgentCore } from './core.ts';
import type { Unlock } from './gate.ts';
import type { Turn, TurnEvent } from './turn.ts';

/**
 * Where a chat turn sends what it produces (the router's JSON reply and SSE
 * stream, chat(), stream()): its events as they come, then exactly one of
 * `done` or `failed`, once the agent is free for its next turn.
 */
export interface ChatSink {
  /** An event the turn produced; a promise to wait for before the next (backpressure). */
  event?(event: TurnEvent): Promise<void> | undefined;
  /** The turn completed and was committed; `truncated` when the provider cut the reply short. */
  done(reply: string, truncated: boolean): void;
  /** The turn failed or was cut; it changed nothing. */
  failed(error: unknown): void;
}

/** What a chat turn is asked: the agent's model and settings at the time it was asked. */
export interface ChatAsk {
  readonly model: Model;
  readonly system: string | undefined;
  readonly lastMessages: number | undefined;
  readonly message: string;
}

/**
 * Runs one chat turn: enter the agent, stream the model's reply into the
 * turn and the sink, commit the user message and the reply as one, leave.
 * A turn that fails or is cut leaves no trace, and the sink hears how it ended.
 */
export function runChat<S extends JsonObject>(core: AgentCore<S>, turn: Turn<S>, ask: ChatAsk, sink: ChatSink): void {
  void new ChatRun(core, turn, ask, sink).start();
}

class ChatRun<S extends JsonObject> {
  readonly #core: AgentCore<S>;
  readonly #turn: Turn<S>;
  readonly #ask: ChatAsk;
  readonly #sink: ChatSink;
  #unlock: Unlock | undefined;
  #chunks: AsyncIterator<ModelChunk> | undefined;
  /** The model said it is done: its iterator needs no return(). */
  #finished = false;
  #ended = false;
  #truncated = false;
  /**
   * A cut ends the turn at once, wherever it waits: a model or a consumer
   * that ignores the signal cannot hold the agent. What it does later is dropped.
   */
  readonly #onCut = (reason: unknown): void => this.#end({ error: reason });

  constructor(core: AgentCore<S>, turn: Turn<S>, ask: ChatAsk, sink: ChatSink) {
    this.#core = core;
    this.#turn = turn;
    this.#ask = ask;
    this.#sink = sink;
  }

  async start(): Promise<void> {
    try {
      this.#unlock = await this.#core.gate.enter(this.#turn);
    } catch (error) {
      this.#turn.fail();
      return this.#sink.failed(error);
    }
    const cancel = this.#turn.cancel;
    if (cancel.aborted) return this.#end({ error: cancel.reason });
    cancel.onAbort(this.#onCut);
    try {
      await this.#run();
      this.#end(undefined);
    } catch (error) {
      this.#end({ error });
    }
  }

  async #run(): Promise<void> {
    const { model, system, lastMessages, message } = this.#ask;
    const turn = this.#turn;
    const user: ChatMessage = Object.freeze({ role: 'user', content: message });
    const request = modelRequest(system, window(this.#core.sync.messages, lastMessages, user), turn);
    const chunks = (this.#chunks = model.stream(request)[Symbol.asyncIterator]());
    let usage: TokenUsage | undefined;
    for (;;) {
      const next = await chunks.next();
      if (this.#ended) return;
      if (next.done === true) break;
      for (const event of eventsOf(model, next.value)) {
        if (event.type === 'usage') usage = event.usage;
        else if (event.type === 'truncated') this.#truncated = true;
        turn.emit(event);
        const waiting = this.#sink.event?.(event);
        if (waiting !== undefined) await waiting;
        if (this.#ended) return;
      }
    }
    this.#finished = true;
    // From here the outcome is the commit's: a cut during it could leave the turn stored yet reported failed.
    turn.cancel.offAbort(this.#onCut);
    turn.cancel.throwIfAborted();
    turn.to('committing');
    const assistant: ChatMessage = { role: 'assistant', content: turn.text() };
    if (usage !== undefined) assistant.usage = Object.freeze({ ...usage });
    if (this.#truncated) assistant.truncated = true;
    // Frozen, as every message the agent writes: MemoryStorage can keep it as it is.
    await this.#core.commit(turn, [user, Object.freeze(assistant)]);
    turn.to('done');
  }

  /** Ends the turn once, then tells the sink, after the agent is free for its next turn. */
  #end(failure: { error: unknown } | undefined): void {
    if (this.#ended) return;
    this.#ended = true;
    const turn = this.#turn;
    turn.cancel.offAbort(this.#onCut);
    // Not awaited: a hung model's generator cannot return before its pending next().
    if (this.#chunks !== undefined && !this.#finished) Promise.resolve(this.#chunks.return?.()).catch(() => {});
    if (failure !== undefined) {
      turn.fail();
      // A model still holding the signal of a cancel made for this turn stops.
      if (turn.ownsCancel) turn.cancel.abort(new Error('turn ended before it completed'));
    }
    const report = (): void => (failure !== undefined ? this.#sink.failed(failure.error) : this.#sink.done(turn.text(), this.#truncated));
    let leaving: Promise<void> | undefined;
    try {
      leaving = this.#core.leave(turn, this.#unlock as Unlock);
    } catch (error) {
      return this.#sink.failed(failure?.error ?? error);
    }
    if (leaving === undefined) return report();
    leaving.then(report, (error: unknown) => this.#sink.failed(failure?.error ?? error));
  }
}

/** The model's request; its signal is made only if the model asks for it (a turn's cancel needs none otherwise). */
function modelRequest(system: string | undefined, messages: ChatMessage[], turn: { readonly signal: AbortSignal }): ModelRequest {
  return {
    system,
    messages,
    get signal() {
      return turn.signal;
    },
  };
}

/**
 * The latest `last` messages with the new one, starting at a user message
 * (a provider refuses a conversation that opens with a reply). Always a
 * copy: a model that changes its request's array changes its own.
 */
export function window(history: readonly ChatMessage[], last: number | undefined, user: ChatMessage): ChatMessage[] {
  let start = 0;
  if (last !== undefined && history.length + 1 > last) {
    start = history.length + 1 - last;
    while (start < history.length && (history[start] as ChatMessage).role !== 'user') start++;
  }
  const messages = history.slice(start);
  messages.push(user);
  return messages;
}

/** One model chunk as the turn's events: text, or a record of usage, the cut-short mark, or both. */
function eventsOf(model: Model, chunk: ModelChunk): TurnEvent[] {
  if (typeof chunk === 'string') return chunk.length === 0 ? [] : [{ type: 'text', text: chunk }];
  if (typeof chunk === 'object' && chunk !== null) {
    const { usage, truncated } = chunk as { usage?: unknown; truncated?: unknown };
    const events: TurnEvent[] = [];
    // `usage: null` is a provider's "none" (OpenAI's chunks carry it until the last): no usage, not `{}` in history.
    if (typeof usage === 'object' && usage !== null) events.push({ type: 'usage', usage: usage as TokenUsage });
    if (truncated === true) events.push({ type: 'truncated' });
    if (typeof usage === 'object' || typeof truncated === 'boolean') return events;
  }
  throw new AgentRouterError(
    500,
    'bad_model_chunk',
    `Model ${model.name} yielded a ${chunk === null ? 'null' : typeof chunk} chunk; chunks must be strings, {usage} or {truncated}`,
  );
}
