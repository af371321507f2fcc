import type { TurnKind, TurnPhase } from '../agent/turn.ts';
import { AgentRouterError } from '../errors.ts';
import type { Log } from '../lib/logger.ts';
import { MetricsRegistry, type Counter, type Histogram } from '../lib/metrics.ts';
import type { TokenUsage } from '../types.ts';

/** What `onTurnStart` gets: a local turn the router was asked for (it may still wait behind the agent's earlier turns). */
export interface TurnStartInfo {
  agentId: string;
  turnId: string;
  /** `chat`, or `action` for an invoke. */
  kind: TurnKind;
  /** The invoked method's name, for an action turn. */
  action?: string | undefined;
  /** The request's id (`x-request-id`). */
  requestId: string;
}

/** What `onTurnEnd` gets. */
export interface TurnEndInfo extends TurnStartInfo {
  /** `paused`: a chat or approval turn that ended waiting for decisions on its tool calls (it was committed). */
  outcome: 'done' | 'failed' | 'cancelled' | 'paused';
  /** The error code of a turn that failed or was cancelled, when known. */
  code?: string | undefined;
  /** Tokens the turn's model calls reported, summed. */
  usage?: TokenUsage | undefined;
  /** From the request for the turn to its end, queue wait included. */
  durationMs: number;
  /** Waiting behind the agent's earlier turns. */
  queuedMs: number;
}

export type TurnHook<T> = (turn: T) => void | Promise<void>;

/** What an observed request tells its observer (an Exchange). */
export interface ObservedTurn {
  readonly agentId: string;
  readonly turnId: string | undefined;
  readonly requestId: string;
  /** `chat` or `invoke`: the turn's route. */
  readonly route: string;
  /** The invoked method's name, for an invoke. */
  readonly action: string | undefined;
  /** performance.now() at the turn's request, and when it stopped waiting (0: not yet). */
  turnStart: number;
  loadedAt: number;
  /** The agent's Turn, once it moved. */
  turn: { kind: TurnKind; phase: TurnPhase; events: ReadonlyArray<{ type: string; usage?: TokenUsage }> } | undefined;
  /** What the request was failed with, if it was. */
  failure: unknown;
}

/** The router's hooks and metrics; made only when one is on, so a plain router pays nothing for them. */
export class Observer {
  readonly #onStart: TurnHook<TurnStartInfo> | undefined;
  readonly #onEnd: TurnHook<TurnEndInfo> | undefined;
  readonly #logger: Log;
  readonly registry: MetricsRegistry | undefined;
  /** Local turns asked for and not yet let in. */
  #queued = 0;
  readonly #turns: Counter | undefined;
  readonly #duration: Histogram | undefined;
  readonly #queueWait: Histogram | undefined;
  readonly #tokens: Counter | undefined;
  readonly #requests: Counter | undefined;

  constructor(options: { onTurnStart?: TurnHook<TurnStartInfo> | undefined; onTurnEnd?: TurnHook<TurnEndInfo> | undefined; metrics?: boolean | undefined }, logger: Log, read: { liveAgents(): number; openStreams(): number }) {
    this.#onStart = options.onTurnStart;
    this.#onEnd = options.onTurnEnd;
    this.#logger = logger;
    if (options.metrics !== true) return;
    const registry = (this.registry = new MetricsRegistry());
    this.#turns = registry.counter('agent_router_turns_total', 'Turns ended, by outcome and error code.');
    this.#duration = registry.histogram('agent_router_turn_duration_seconds', 'Turn duration in seconds, queue wait included.');
    this.#queueWait = registry.histogram('agent_router_turn_queue_seconds', "Seconds a turn waited behind the agent's earlier turns.");
    this.#tokens = registry.counter('agent_router_tokens_total', 'Model tokens reported, by direction (input, output).');
    this.#requests = registry.counter('agent_router_http_requests_total', 'HTTP requests answered, by route and status.');
    registry.gauge('agent_router_live_agents', 'Agent instances live in the pool.', read.liveAgents);
    registry.gauge('agent_router_open_streams', 'SSE streams open.', read.openStreams);
    registry.gauge('agent_router_queued_turns', "Turns waiting behind their agent's earlier turns.", () => this.#queued);
  }

  /** A local turn was asked for (its id is made). */
  turnStarted(exchange: ObservedTurn): void {
    exchange.turnStart = performance.now();
    this.#queued++;
    if (this.#onStart !== undefined) this.#call(this.#onStart, info(exchange), exchange);
  }

  /** The turn moved: the first move leaves the queue. */
  turnMoved(exchange: ObservedTurn): void {
    if (exchange.loadedAt !== 0) return;
    exchange.loadedAt = performance.now();
    this.#queued--;
  }

  /** The turn's end: once per turn. */
  turnEnded(exchange: ObservedTurn): void {
    const now = performance.now();
    if (exchange.loadedAt === 0) {
      exchange.loadedAt = now;
      this.#queued--;
    }
    const durationMs = now - exchange.turnStart;
    const queuedMs = exchange.loadedAt - exchange.turnStart;
    const { outcome, code } = outcomeOf(exchange);
    const usage = usageOf(exchange.turn?.events);
    this.#turns?.inc(code === undefined ? { outcome } : { outcome, code });
    this.#duration?.observe(durationMs / 1000);
    this.#queueWait?.observe(queuedMs / 1000);
    if (usage !== undefined && this.#tokens !== undefined) {
      if (usage.inputTokens !== undefined) this.#tokens.inc({ direction: 'input' }, usage.inputTokens);
      if (usage.outputTokens !== undefined) this.#tokens.inc({ direction: 'output' }, usage.outputTokens);
    }
    if (this.#onEnd === undefined) return;
    const ended: TurnEndInfo = { ...info(exchange), outcome, durationMs, queuedMs };
    if (code !== undefined) ended.code = code;
    if (usage !== undefined) ended.usage = usage;
    this.#call(this.#onEnd, ended, exchange);
  }

  /** A request was answered (routes the router does not serve are `none`). */
  requestDone(route: string, status: number): void {
    this.#requests?.inc({ route, status: String(status) });
  }

  /** Runs a hook without waiting for it; what it throws or rejects with goes to the logger. */
  #call<T>(hook: TurnHook<T>, value: T, exchange: ObservedTurn): void {
    const report = (error: unknown): void => this.#logger.error('AgentRouter: a turn hook failed', error, { requestId: exchange.requestId, agentId: exchange.agentId, turnId: exchange.turnId });
    try {
      const result = hook(value);
      if (result !== undefined && typeof (result as Promise<void>).then === 'function') (result as Promise<void>).then(undefined, report);
    } catch (error) {
      report(error);
    }
  }
}

function info(exchange: ObservedTurn): TurnStartInfo {
  const started: TurnStartInfo = { agentId: exchange.agentId, turnId: exchange.turnId as string, kind: exchange.turn?.kind ?? (exchange.route === 'invoke' ? 'action' : 'chat'), requestId: exchange.requestId };
  if (exchange.action !== undefined) started.action = exchange.action;
  return started;
}

/** The Turn's end phase when the agent ran one, else the request's answer; the code from the failure, or the cut's reason. */
function outcomeOf(exchange: ObservedTurn): { outcome: TurnEndInfo['outcome']; code: string | undefined } {
  const failure = exchange.failure;
  const code = failure instanceof AgentRouterError ? failure.code : failure === undefined ? undefined : 'internal_error';
  const phase = exchange.turn?.phase;
  // A turn that asked for approval ended paused, committed with its calls waiting.
  if (phase === 'done') return { outcome: exchange.turn?.events.some((e) => e.type === 'tool.approval_required') === true ? 'paused' : 'done', code: undefined };
  // Cut, but not at anyone's asking: the turn failed to end within turnTimeout.
  if (code === 'turn_timeout') return { outcome: 'failed', code };
  if (phase === 'cancelled' || code === 'cancelled' || code === 'client_closed') return { outcome: 'cancelled', code: code ?? 'cancelled' };
  if (phase === 'failed' || failure !== undefined) return { outcome: 'failed', code };
  return { outcome: 'done', code: undefined };
}

function usageOf(events: ReadonlyArray<{ type: string; usage?: TokenUsage }> | undefined): TokenUsage | undefined {
  if (events === undefined) return undefined;
  let usage: TokenUsage | undefined;
  for (const event of events) {
    if (event.type !== 'usage' || event.usage === undefined) continue;
    usage ??= {};
    for (const key of ['inputTokens', 'outputTokens', 'totalTokens'] as const) {
      const n = event.usage[key];
      if (typeof n === 'number') usage[key] = (usage[key] ?? 0) + n;
    }
  }
  return usage;
}
