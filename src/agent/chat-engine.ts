import { AgentRouterError } from '../errors.ts';
import type { Model, ModelChunk } from '../models/model.ts';
import type { AssistantMessage, ChatMessage, JsonObject, TokenUsage, ToolCall } from '../types.ts';
import type { AgentCore } from './core.ts';
import type { Unlock } from './gate.ts';
import { toolMessage, type ToolOutcome, type ToolSet } from './tools.ts';
import { approvalPending, checkDecisions, pendingCalls, refusal, type ApprovalDecision } from './approvals.ts';
import type { Turn, TurnEvent } from './turn.ts';
import { failSpan, type TraceSpan } from '../lib/trace.ts';
import { endModelSpan, modelSpan, tracedTool } from './trace-steps.ts';
import { eventsOf, modelRequest, window } from './model-step.ts';

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
  /** Called just before `done` when the turn paused: these calls wait for a person's decision. */
  paused?(pending: readonly ToolCall[]): void;
  /** The turn failed or was cut; it changed nothing. */
  failed(error: unknown): void;
}

/** What a chat turn is asked: the agent's model and settings at the time it was asked. */
export interface ChatAsk {
  readonly model: Model;
  readonly system: string | undefined;
  readonly lastMessages: number | undefined;
  readonly message: string;
  /** A resumed turn: the decisions on the paused calls, instead of a message. */
  readonly decisions?: readonly ApprovalDecision[] | undefined;
  readonly tools: ToolSet;
  readonly maxSteps: number;
  /** The agent a class tool's method runs on. */
  readonly instance: object;
}

/**
 * Runs one chat turn: enter the agent, stream the model's reply into the
 * turn and the sink, commit the user message and the reply as one, leave.
 * A turn that fails or is cut leaves no trace, and the sink hears how it ended.
 */
export function runChat<S extends JsonObject>(core: AgentCore<S>, turn: Turn<S>, ask: ChatAsk, sink: ChatSink): void {
  new ChatRun(core, turn, ask, sink).start();
}

/**
 * One chat turn, as stages that hand over to one another:
 *
 *     start: enter the agent ── #begin ── #step ── #took, once per chunk ── #stepEnded
 *         ├─ no tool calls: #commit ── #end
 *         └─ tool calls: #afterCalls runs them ── #step again (or #commit, when some wait for approval)
 *
 * A cut or an error at any stage goes to #end, and a stage called after it does nothing. Stages, not one
 * async function: a stream waiting on its model then holds no suspended async frames (BENCHMARKS.md, "Memory").
 */
class ChatRun<S extends JsonObject> {
  readonly #core: AgentCore<S>;
  readonly #turn: Turn<S>;
  readonly #ask: ChatAsk;
  readonly #sink: ChatSink;
  #unlock: Unlock | undefined;
  /** The turn's new messages, committed together at its end: the user's (or the decided calls' answers), each step's, the tools' answers. */
  #added: ChatMessage[] = [];
  /** What the next step sends. Each step gets an array of its own: a model may still hold the one before. */
  #messages: ChatMessage[] = [];
  #steps = 0;
  /** The model step under way: its chunks, where its events begin in the turn's, and what it said besides text. */
  #chunks: AsyncIterator<ModelChunk> | undefined;
  #firstEvent = 0;
  #calls: ToolCall[] | undefined;
  #usage: TokenUsage | undefined;
  #stepTruncated = false;
  #span: TraceSpan | undefined;
  /** The model said it is done: its iterator needs no return(). */
  #finished = false;
  #ended = false;
  #truncated = false;
  /** The calls a paused turn waits on, once committed. */
  #pending: ToolCall[] | undefined;
  /**
   * A cut or a failure ends the turn at once, wherever it waits: a model or a consumer
   * that ignores the signal cannot hold the agent. What it does later is dropped.
   */
  readonly #onFail = (error: unknown): void => this.#end({ error });
  /** Every chunk of every step comes back through these two: nothing is made per chunk. */
  readonly #onChunk = (next: IteratorResult<ModelChunk>): void => this.#took(next);
  readonly #onTaken = (): void => this.#pull();

  constructor(core: AgentCore<S>, turn: Turn<S>, ask: ChatAsk, sink: ChatSink) {
    this.#core = core;
    this.#turn = turn;
    this.#ask = ask;
    this.#sink = sink;
  }

  start(): void {
    const gate = this.#core.gate;
    let unlock: Unlock | undefined;
    try {
      unlock = gate.tryEnter(this.#turn);
    } catch (error) {
      return this.#refused(error);
    }
    if (unlock !== undefined) return this.#entered(unlock);
    gate.enter(this.#turn).then(
      (entered) => this.#entered(entered),
      (error: unknown) => this.#refused(error),
    );
  }

  /** The turn never got in: it holds nothing to give back. */
  #refused(error: unknown): void {
    this.#turn.fail();
    this.#sink.failed(error);
  }

  #entered(unlock: Unlock): void {
    this.#unlock = unlock;
    const cancel = this.#turn.cancel;
    if (cancel.aborted) return this.#end({ error: cancel.reason });
    cancel.onAbort(this.#onFail);
    this.#stage(() => this.#begin());
  }

  /** Runs a stage unless the turn ended; what it throws ends the turn. */
  #stage(run: () => void): void {
    if (this.#ended) return;
    try {
      run();
    } catch (error) {
      this.#end({ error });
    }
  }

  /** The turn's first messages: the user's, or for a resumed turn the answers to its paused calls. */
  #begin(): void {
    const { lastMessages, message, decisions } = this.#ask;
    const history = this.#core.sync.messages;
    const waiting = pendingCalls(history);
    if (decisions === undefined) {
      if (waiting.length > 0) throw approvalPending(this.#core.id, waiting);
      const user: ChatMessage = Object.freeze({ role: 'user', content: message });
      this.#messages = window(history, lastMessages, user);
      this.#added = [user];
      return this.#step();
    }
    this.#decide(waiting, decisions).then((answers) => {
      if (answers === undefined) return;
      this.#stage(() => {
        this.#messages = [...window(history, lastMessages, undefined), ...answers];
        this.#added = answers;
        this.#step();
      });
    }, this.#onFail);
  }

  /** Asks the model for its next reply, in its span when the turn is traced; each chunk comes back to #took. */
  #step(): void {
    const { model, system, tools } = this.#ask;
    const turn = this.#turn;
    this.#steps++;
    const request = modelRequest(system, this.#messages, turn, tools.size > 0 ? tools.definitions : undefined);
    const link = turn.cancel.trace;
    this.#span = link === undefined ? undefined : modelSpan(link, model, request);
    this.#firstEvent = turn.events.length;
    this.#calls = undefined;
    this.#usage = undefined;
    this.#stepTruncated = false;
    this.#finished = false;
    this.#chunks = model.stream(request)[Symbol.asyncIterator]();
    this.#pull();
  }

  #pull(): void {
    if (this.#ended) return;
    let next: Promise<IteratorResult<ModelChunk>>;
    try {
      next = Promise.resolve((this.#chunks as AsyncIterator<ModelChunk>).next());
    } catch (error) {
      return this.#end({ error });
    }
    next.then(this.#onChunk, this.#onFail);
  }

  /** One chunk of the step (or its end) into the turn and the sink; the next is pulled once the sink took it. */
  #took(next: IteratorResult<ModelChunk>): void {
    if (this.#ended) return;
    try {
      if (next.done === true) return this.#stepEnded();
      const chunk = next.value;
      // Nearly every chunk is text: one event, no list of them.
      const taking = typeof chunk !== 'string' ? this.#record(eventsOf(this.#ask.model, chunk)) : chunk === '' ? undefined : this.#emit({ type: 'text', text: chunk });
      if (taking === undefined) this.#pull();
      else taking.then(this.#onTaken, this.#onFail);
    } catch (error) {
      this.#end({ error });
    }
  }

  /** A chunk that is not text: its events in order, each once the sink took the one before. */
  async #record(events: readonly TurnEvent[]): Promise<void> {
    for (const event of events) {
      if (this.#ended) return;
      if (event.type === 'usage') this.#usage = event.usage;
      else if (event.type === 'truncated') this.#stepTruncated = this.#truncated = true;
      else if (event.type === 'tool.call') (this.#calls ??= []).push(event.call);
      const taking = this.#emit(event);
      if (taking !== undefined) await taking;
    }
  }

  /** The model's reply is complete: the turn commits with it, or the tools it called run first. */
  #stepEnded(): void {
    this.#finished = true;
    const message: AssistantMessage = { role: 'assistant', content: this.#turn.text(this.#firstEvent) };
    if (this.#usage !== undefined) message.usage = Object.freeze({ ...this.#usage });
    if (this.#stepTruncated) message.truncated = true;
    const calls = this.#calls ?? [];
    const span = this.#span;
    this.#span = undefined;
    if (span !== undefined) endModelSpan(span, { message, calls }, undefined);
    if (calls.length === 0) {
      this.#added.push(Object.freeze(message));
      return this.#commit();
    }
    if (this.#steps >= this.#ask.maxSteps) {
      throw new AgentRouterError(500, 'max_steps_exceeded', `The model was still calling tools after ${this.#ask.maxSteps} steps, the agent's maxSteps; the turn was stopped`, { expose: true });
    }
    this.#afterCalls(message, calls).then((more) => {
      if (more !== undefined) this.#stage(() => (more ? this.#step() : this.#commit()));
    }, this.#onFail);
  }

  /**
   * A step's calls: those that need no approval run at once; the others are announced and the turn pauses
   * after this step. True: the model is asked again; false: paused; undefined: the turn ended meanwhile.
   */
  async #afterCalls(message: AssistantMessage, calls: ToolCall[]): Promise<boolean | undefined> {
    const tools = this.#ask.tools;
    message.toolCalls = Object.freeze(calls.map((call) => Object.freeze({ ...call })));
    const pending = calls.filter((call) => tools.needsApproval(call.name, call.arguments));
    const answers = await this.#runTools(pending.length === 0 ? calls : calls.filter((call) => !pending.includes(call)));
    if (answers === undefined) return undefined;
    const reply = Object.freeze(message);
    this.#messages = [...this.#messages, reply, ...answers];
    this.#added.push(reply, ...answers);
    if (pending.length === 0) return true;
    // Paused: the step and what ran are committed; the unanswered calls wait in history for a decision.
    for (const call of pending) if (!(await this.#announce(call))) return undefined;
    this.#pending = pending;
    return false;
  }

  /** Stores the turn's messages and state as one. From here the outcome is the commit's: a cut now could leave the turn stored yet reported failed. */
  #commit(): void {
    const turn = this.#turn;
    turn.cancel.offAbort(this.#onFail);
    turn.cancel.throwIfAborted();
    turn.to('committing');
    // Frozen, as every message the agent writes: MemoryStorage can keep it as it is.
    const committing = this.#core.commit(turn, this.#added);
    if (committing === undefined) return this.#committed();
    committing.then(() => this.#committed(), this.#onFail);
  }

  #committed(): void {
    this.#turn.to('done');
    this.#end(undefined);
  }

  /** A resumed turn's first answers, in the calls' order: approved calls run, refused ones are told to the model. */
  async #decide(waiting: readonly ToolCall[], decisions: readonly ApprovalDecision[]): Promise<ChatMessage[] | undefined> {
    const decided = checkDecisions(this.#core.id, waiting, decisions);
    const ran = await this.#runTools(waiting.filter((call) => decided.get(call.id)?.approved === true));
    if (ran === undefined) return undefined;
    const answers: ChatMessage[] = [];
    for (const call of waiting) {
      const decision = decided.get(call.id) as ApprovalDecision;
      if (decision.approved) {
        answers.push(ran.shift() as ChatMessage);
        continue;
      }
      const outcome = refusal(call, decision.reason);
      const sending = this.#emit({ type: 'tool.result', call, outcome });
      if (sending !== undefined) await sending;
      if (this.#ended) return undefined;
      answers.push(Object.freeze(toolMessage(call, outcome)));
    }
    return answers;
  }

  /** A call that waits for approval, told to the sink; false when the turn ended meanwhile. */
  async #announce(call: ToolCall): Promise<boolean> {
    const sending = this.#emit({ type: 'tool.approval_required', call });
    if (sending !== undefined) await sending;
    return !this.#ended;
  }

  /** Runs a step's calls at once, each with the turn's signal; their answers in call order, or undefined when the turn ended. */
  async #runTools(calls: readonly ToolCall[]): Promise<ChatMessage[] | undefined> {
    const turn = this.#turn;
    const { tools, instance } = this.#ask;
    const ctx = { agentId: this.#core.id, turnId: turn.id, signal: turn.signal };
    const link = turn.cancel.trace?.tracer === undefined ? undefined : turn.cancel.trace;
    const run = (call: ToolCall): Promise<ToolOutcome> => tools.run(instance, call.name, call.arguments, ctx);
    const outcomes = await Promise.all(calls.map((call) => (link === undefined ? run(call) : tracedTool(link, call, () => run(call)))));
    if (this.#ended) return undefined;
    const answers: ChatMessage[] = [];
    for (const [i, call] of calls.entries()) {
      const outcome = outcomes[i] as ToolOutcome;
      const waiting = this.#emit({ type: 'tool.result', call, outcome });
      if (waiting !== undefined) await waiting;
      if (this.#ended) return undefined;
      answers.push(Object.freeze(toolMessage(call, outcome)));
    }
    return answers;
  }

  /** An event to the turn and the sink; a promise when the sink asks to wait (backpressure). */
  #emit(event: TurnEvent): Promise<void> | undefined {
    this.#turn.emit(event);
    return this.#sink.event?.(event);
  }

  /** Ends the turn once, then tells the sink, after the agent is free for its next turn. */
  #end(failure: { error: unknown } | undefined): void {
    if (this.#ended) return;
    this.#ended = true;
    const turn = this.#turn;
    turn.cancel.offAbort(this.#onFail);
    // Not awaited: a hung model's generator cannot return before its pending next().
    if (this.#chunks !== undefined && !this.#finished) Promise.resolve(this.#chunks.return?.()).catch(() => {});
    if (failure !== undefined) {
      // A model step cut short: its span ends with the turn's failure.
      if (this.#span !== undefined) endModelSpan(this.#span, undefined, failure.error);
      turn.fail();
      const span = turn.cancel.trace?.span;
      if (span !== undefined) failSpan(span, failure.error);
      // A model still holding the signal of a cancel made for this turn stops.
      if (turn.ownsCancel) turn.cancel.abort(new Error('turn ended before it completed'));
    }
    const report = (): void => {
      if (failure !== undefined) return this.#sink.failed(failure.error);
      if (this.#pending !== undefined) this.#sink.paused?.(this.#pending);
      this.#sink.done(turn.text(), this.#truncated);
    };
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
