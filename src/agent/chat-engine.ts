import { AgentRouterError } from '../errors.ts';
import type { Model, ModelChunk, ModelRequest } from '../models/model.ts';
import type { AssistantMessage, ChatMessage, JsonObject, TokenUsage, ToolCall } from '../types.ts';
import type { AgentCore } from './core.ts';
import type { Unlock } from './gate.ts';
import { toolMessage, type ToolOutcome, type ToolSet } from './tools.ts';
import { approvalPending, checkDecisions, pendingCalls, refusal, type ApprovalDecision } from './approvals.ts';
import type { Turn, TurnEvent } from './turn.ts';
import { failSpan, type TraceSpan } from '../lib/trace.ts';
import { endModelSpan, modelSpan, tracedTool } from './trace-steps.ts';

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
  /** The calls a paused turn waits on, once committed. */
  #pending: ToolCall[] | undefined;
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
      this.#unlock = this.#core.gate.tryEnter(this.#turn) ?? (await this.#core.gate.enter(this.#turn));
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
    const { system, lastMessages, message, tools, maxSteps } = this.#ask;
    const turn = this.#turn;
    const history = this.#core.sync.messages;
    const waiting = pendingCalls(history);
    // The turn's new messages, committed together at its end: the user's (or the decided calls' answers), each step's, the tools' answers.
    const added: ChatMessage[] = [];
    // Each step's request gets an array of its own: a model may still hold the one before.
    let messages: ChatMessage[];
    if (this.#ask.decisions !== undefined) {
      const answers = await this.#decide(waiting, this.#ask.decisions);
      if (answers === undefined) return;
      messages = [...window(history, lastMessages, undefined), ...answers];
      added.push(...answers);
    } else {
      if (waiting.length > 0) throw approvalPending(this.#core.id, waiting);
      const user: ChatMessage = Object.freeze({ role: 'user', content: message });
      messages = window(history, lastMessages, user);
      added.push(user);
    }
    for (let step = 1; ; step++) {
      const request = modelRequest(system, messages, turn, tools.size > 0 ? tools.definitions : undefined);
      const reply = await this.#step(request);
      if (reply === undefined) return;
      if (reply.calls.length === 0) {
        added.push(Object.freeze(reply.message));
        break;
      }
      if (step >= maxSteps) {
        throw new AgentRouterError(500, 'max_steps_exceeded', `The model was still calling tools after ${maxSteps} steps, the agent's maxSteps; the turn was stopped`, { expose: true });
      }
      reply.message.toolCalls = Object.freeze(reply.calls.map((call) => Object.freeze({ ...call })));
      const pending = reply.calls.filter((call) => tools.needsApproval(call.name, call.arguments));
      const answers = await this.#runTools(pending.length === 0 ? reply.calls : reply.calls.filter((call) => !pending.includes(call)));
      if (answers === undefined) return;
      messages = [...messages, Object.freeze(reply.message), ...answers];
      added.push(Object.freeze(reply.message), ...answers);
      if (pending.length > 0) {
        // Paused: the step and what ran are committed; the unanswered calls wait in history for a decision.
        for (const call of pending) if (!(await this.#announce(call))) return;
        this.#pending = pending;
        break;
      }
    }
    this.#finished = true;
    // From here the outcome is the commit's: a cut during it could leave the turn stored yet reported failed.
    turn.cancel.offAbort(this.#onCut);
    turn.cancel.throwIfAborted();
    turn.to('committing');
    // Frozen, as every message the agent writes: MemoryStorage can keep it as it is.
    const committing = this.#core.commit(turn, added);
    if (committing !== undefined) await committing;
    turn.to('done');
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

  /** A model step, in its span when the turn is traced. Not async itself: an untraced step is the model step's own promise. */
  #step(request: ModelRequest): Promise<{ message: AssistantMessage; calls: ToolCall[] } | undefined> {
    const link = this.#turn.cancel.trace;
    const span = link === undefined ? undefined : modelSpan(link, this.#ask.model, request);
    return span === undefined ? this.#modelStep(request) : this.#tracedStep(request, span);
  }

  async #tracedStep(request: ModelRequest, span: TraceSpan): Promise<{ message: AssistantMessage; calls: ToolCall[] } | undefined> {
    try {
      const reply = await this.#modelStep(request);
      endModelSpan(span, reply, this.#turn.cancel.reason);
      return reply;
    } catch (error) {
      failSpan(span, error);
      span.end();
      throw error;
    }
  }

  /** One model step: its chunks become events; undefined when the turn ended meanwhile. */
  async #modelStep(request: ModelRequest): Promise<{ message: AssistantMessage; calls: ToolCall[] } | undefined> {
    const turn = this.#turn;
    const model = this.#ask.model;
    this.#finished = false;
    const chunks = (this.#chunks = model.stream(request)[Symbol.asyncIterator]());
    const calls: ToolCall[] = [];
    const text: string[] = [];
    let usage: TokenUsage | undefined;
    let truncated = false;
    for (;;) {
      const next = await chunks.next();
      if (this.#ended) return undefined;
      if (next.done === true) break;
      const chunk = next.value;
      // Nearly every chunk is text: one event, no list of them.
      if (typeof chunk === 'string') {
        if (chunk === '') continue;
        text.push(chunk);
        const waiting = this.#emit({ type: 'text', text: chunk });
        if (waiting !== undefined) await waiting;
        if (this.#ended) return undefined;
        continue;
      }
      for (const event of eventsOf(model, chunk)) {
        if (event.type === 'usage') usage = event.usage;
        else if (event.type === 'truncated') truncated = this.#truncated = true;
        else if (event.type === 'text') text.push(event.text);
        else if (event.type === 'tool.call') calls.push(event.call);
        const waiting = this.#emit(event);
        if (waiting !== undefined) await waiting;
        if (this.#ended) return undefined;
      }
    }
    this.#finished = true;
    const message: AssistantMessage = { role: 'assistant', content: text.join('') };
    if (usage !== undefined) message.usage = Object.freeze({ ...usage });
    if (truncated) message.truncated = true;
    return { message, calls };
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
    turn.cancel.offAbort(this.#onCut);
    // Not awaited: a hung model's generator cannot return before its pending next().
    if (this.#chunks !== undefined && !this.#finished) Promise.resolve(this.#chunks.return?.()).catch(() => {});
    if (failure !== undefined) {
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

const turnOfRequest = Symbol('agent-router.turnOfRequest');

/**
 * A request's `signal`, made only if the model reads it: one accessor shared by every request, own and
 * enumerable so a wrapping model's `{...request}` keeps it (BENCHMARKS.md, "What runs").
 */
const LAZY_SIGNAL: PropertyDescriptor = {
  get(this: { [turnOfRequest]: { readonly signal: AbortSignal } }): AbortSignal {
    return this[turnOfRequest].signal;
  },
  enumerable: true,
};

/** The model's request for one step. */
function modelRequest(system: string | undefined, messages: ChatMessage[], turn: { readonly signal: AbortSignal }, tools: ModelRequest['tools']): ModelRequest {
  const request: Record<string | symbol, unknown> = { system, messages, [turnOfRequest]: turn };
  if (tools !== undefined) request['tools'] = tools;
  Object.defineProperty(request, 'signal', LAZY_SIGNAL);
  return request as unknown as ModelRequest;
}

/**
 * The latest `last` messages with the new one, starting at a user message:
 * a provider refuses a conversation that opens with a reply or with a tool
 * result cut from its call. Always a copy: a model that changes its request's array changes its own.
 */
export function window(history: readonly ChatMessage[], last: number | undefined, user: ChatMessage | undefined): ChatMessage[] {
  let start = 0;
  const total = history.length + (user === undefined ? 0 : 1);
  if (last !== undefined && total > last) {
    start = total - last;
    // Only a user message opens a window: never an assistant's tool calls or a tool result, which come in pairs.
    while (start < history.length && (history[start] as ChatMessage).role !== 'user') start++;
    // A resumed turn with no user message in the window: back to the one that opened the paused turn.
    if (user === undefined) while (start > 0 && (history[start] as ChatMessage | undefined)?.role !== 'user') start--;
  }
  const messages = history.slice(start);
  if (user !== undefined) messages.push(user);
  return messages;
}

/** One model chunk as the turn's events: text, a tool call, or a record of usage, the cut-short mark, or both. */
function eventsOf(model: Model, chunk: ModelChunk): TurnEvent[] {
  if (typeof chunk === 'string') return chunk.length === 0 ? [] : [{ type: 'text', text: chunk }];
  if (typeof chunk === 'object' && chunk !== null) {
    const { usage, truncated, toolCall } = chunk as { usage?: unknown; truncated?: unknown; toolCall?: unknown };
    const call = toolCall as Partial<ToolCall> | null | undefined;
    if (typeof call === 'object' && call !== null && typeof call.id === 'string' && typeof call.name === 'string' && typeof call.arguments === 'string') {
      return [{ type: 'tool.call', call: { id: call.id, name: call.name, arguments: call.arguments } }];
    }
    const events: TurnEvent[] = [];
    // `usage: null` is a provider's "none" (OpenAI's chunks carry it until the last): no usage, not `{}` in history.
    if (typeof usage === 'object' && usage !== null) events.push({ type: 'usage', usage: usage as TokenUsage });
    if (truncated === true) events.push({ type: 'truncated' });
    if (typeof usage === 'object' || typeof truncated === 'boolean') return events;
  }
  throw new AgentRouterError(
    500,
    'bad_model_chunk',
    `Model ${model.name} yielded a ${chunk === null ? 'null' : typeof chunk} chunk; chunks must be strings, {usage}, {truncated} or {toolCall: {id, name, arguments}}`,
  );
}
