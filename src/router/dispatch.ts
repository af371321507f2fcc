import type { IncomingMessage, ServerResponse } from 'node:http';
import { cancelledBy, chatTurn, committedState, servesDirectly, type Agent, type ChatSink } from '../agent/agent.ts';
import type { TurnCancel } from '../lib/cancel.ts';
import { AgentRouterError, httpErrors } from '../errors.ts';
import { streamReset } from '../http/body.ts';
import { parseStreamFlag, queryParam } from '../http/path.ts';
import { chatReply, HTTPTransport, typedStream, type RemoteChatReply } from '../transports/http.ts';
import type { AgentTransport, TransportCallOptions } from '../transports/transport.ts';
import type { JsonObject, OnDisconnect, ToolCall, WhenBusy } from '../types.ts';
import { approvalList } from '../agent/approvals.ts';
import type { Exchange, ExchangeHost } from './exchange.ts';
import { invokePayload } from './payload.ts';
import { chatMessageOf, streamUI } from './ui-stream.ts';
import type { RouteAction } from './routes.ts';
import { whenWritten, type TurnLog, type TurnLogs } from './turn-log.ts';
import type { TurnChannel } from '../storage/turn-channel.ts';
import { streamReply, type ReplySource, type StreamOptions } from './stream.ts';
import { logToolFailure, ToolCallList } from './tool-wire.ts';
import type { TurnEvent } from '../agent/turn.ts';
import type { Log } from '../lib/logger.ts';
import { agentBusy, whenBusyOf } from './agent-turns.ts';
import type { SharedTurns } from './shared-turns.ts';

/** Where a request lands: a local instance, or a remote agent behind a transport. */
export type Target = { agent: Agent<any>; pooled: boolean } | RemoteTarget;

export type RemoteTarget = { transport: AgentTransport; requestId: string | undefined; requestHeaders: IncomingMessage['headers'] };

/** What dispatching needs of its router, beyond what an exchange does. */
export interface DispatchHost extends ExchangeHost {
  /** Why no turn may begin any more (AgentServer's close() at its deadline). */
  shut: { reason: unknown } | undefined;
  /** The turn timeout is on. */
  readonly timing: boolean;
  /** Refuses a stream when every stream is in use; counts it otherwise. */
  openStream(): void;
  /** Checks a stream could be opened, without counting it. */
  checkStreams(): void;
  readonly streamOptions: Omit<StreamOptions, 'typed' | 'cancel'>;
  /** The logs of streamed turns, for rejoins. */
  readonly replays: TurnLogs;
  /** What the router shares with other processes through a shared storage's TurnChannel. */
  readonly shared: SharedTurns<Exchange>;
  /** onDisconnect is `continue`: a turn whose client leaves runs to its end. */
  readonly keepOnDisconnect: boolean;
  /** The whenBusy and maxQueue options. */
  readonly busy: { readonly whenBusy: WhenBusy; readonly maxQueue: number };
  /** `keep: false`: an agent not live here is made only to be asked (its storage), not kept, and never refused for a full pool. */
  resolve(agentId: string, req: IncomingMessage, keep?: boolean): Target;
}

/**
 * Runs the request's action on its agent: a chat turn (JSON or streamed),
 * an action, or a state read. It answers through the exchange, now or once
 * the turn ends; a request refused before any turn starts throws.
 */
export function dispatch(host: DispatchHost, exchange: Exchange, action: Exclude<RouteAction, 'request' | 'events' | 'cancel' | 'approvals' | 'approve'>, body: Record<string, unknown>): void {
  const { req, res, agentId } = exchange;
  refuseIfClientGone(res);
  if (host.shut !== undefined) throw host.shut.reason;
  let stream: boolean | 'events' | 'ui' = false;
  let message = '';
  if (action === 'chat') {
    message = chatMessageOf(body);
    stream = parseStreamFlag(queryParam(exchange.query, 'stream'), req.headers.accept);
    // Before the agent is looked up: a refused stream must not make (or evict for) an instance.
    if (stream !== false) host.checkStreams();
  }
  const turn = action === 'chat' || action === 'invoke';
  const whenBusy = turn ? whenBusyOf(queryParam(exchange.query, 'when_busy'), host.busy.whenBusy) : 'enqueue';
  // Only local turns are listed: a remote target applies its own policy.
  if (turn) host.agentTurns.admit(agentId, whenBusy, host.busy.maxQueue);
  const target = host.resolve(agentId, req);
  exchange.pooled = 'agent' in target && target.pooled;
  if (action === 'state' && 'agent' in target) return answerState(host, exchange, target.agent);
  const channel = turn && 'agent' in target ? target.agent.storage.turns : undefined;
  if (channel !== undefined) {
    host.shared.listen(channel);
    // A turn another process runs: refused or cut there too. This process's own were dealt with by admit().
    if (whenBusy === 'interrupt') host.shared.cancelElsewhere(channel, agentId, { all: true }).catch(() => {});
    if (whenBusy === 'reject' && host.agentTurns.of(agentId).length === 0) {
      channel
        .busy(agentId)
        .then((busy) => {
          if (busy) throw agentBusy(agentId);
          refuseIfClientGone(exchange.res);
          begin(host, exchange, action, body, message, stream, target, channel);
        })
        .catch((error: unknown) => exchange.fail(error));
      return;
    }
  }
  begin(host, exchange, action, body, message, stream, target, channel);
}

/**
 * Refuses a turn whose client is gone while the request waited (an async authorize hook, the shared storage's
 * answer): no 'close' will come again to cut the turn, so it must not start.
 */
export function refuseIfClientGone(res: ServerResponse): void {
  if (res.destroyed || streamReset(res)) throw new AgentRouterError(499, 'client_closed', 'Client closed the connection before the turn began');
}

/** The turn channel of the agent's storage when it is shared with other processes. */
export function sharedChannelOf(host: DispatchHost, exchange: Exchange): TurnChannel | undefined {
  const target = host.resolve(exchange.agentId, exchange.req, false);
  return 'agent' in target ? target.agent.storage.turns : undefined;
}

/** The turn (or remote call) of a dispatched request, once it may start. */
function begin(host: DispatchHost, exchange: Exchange, action: RouteAction, body: Record<string, unknown>, message: string, stream: boolean | 'events' | 'ui', target: Target, channel: TurnChannel | undefined): void {
  const keep = keepOnDisconnect(queryParam(exchange.query, 'on_disconnect'), host.keepOnDisconnect);
  // A remote target keeps its own turn timeout; the transport cuts only a silent remote.
  const cancel = exchange.begin(host.timing && 'agent' in target, keep);
  if (action === 'invoke') exchange.action = methodOf(body);
  const turnId = 'agent' in target ? exchange.newTurnId() : undefined;
  if (turnId !== undefined) host.agentTurns.add(exchange);
  if (stream !== false) {
    // A remote is asked for its typed stream by the ui mode too: its tool events become tool parts.
    return openTurnStream(host, exchange, stream, sourceOf(target, exchange, message, cancel, stream !== true), { ...host.streamOptions, typed: stream === 'events', cancel, keep }, channel);
  }
  if (action === 'chat' && 'agent' in target && target.agent[servesDirectly]) {
    target.agent[chatTurn](message, cancelledBy(cancel, turnId), new ChatReply(exchange, host.logger));
    return;
  }
  call(target, exchange, action, body, message, cancel).then(
    (reply) => exchange.finish(reply),
    (error: unknown) => exchange.fail(error),
  );
}

/**
 * Streams a turn's reply. With a storage shared by other processes, the turn's log is copied there, and the head
 * (with its Turn-Id) goes out once any of them can find the turn (or after 2 s): the client may rejoin through any at once.
 */
export function openTurnStream(host: DispatchHost, exchange: Exchange, stream: true | 'events' | 'ui', source: ReplySource, options: StreamOptions, channel: TurnChannel | undefined): void {
  host.openStream();
  exchange.streaming = true;
  const { res, agentId, turnId } = exchange;
  const start = (): void => (stream === 'ui' ? streamUI : streamReply)(res, agentId, source, options, exchange);
  if (channel === undefined || turnId === undefined) return start();
  const announced = host.shared.announce(channel, agentId, turnId);
  options.mirror = (log: TurnLog) => host.shared.mirror(channel, log, announced);
  whenWritten(announced, start);
}

/** An invoke's method name for the turn hooks, when the body names one (call() refuses it otherwise). */
function methodOf(body: Record<string, unknown>): string | undefined {
  const payload = body['payload'];
  const method = (typeof payload === 'object' && payload !== null ? (payload as Record<string, unknown>) : body)['method'];
  return typeof method === 'string' && method !== '' ? method : undefined;
}

/** A local agent's JSON chat turn reports here, and the reply is sent from the turn's end. */
export class ChatReply implements ChatSink {
  readonly #exchange: Exchange;
  readonly #logger: Log;
  #tools: ToolCallList | undefined;
  #paused: JsonObject[] | undefined;

  constructor(exchange: Exchange, logger: Log) {
    this.#exchange = exchange;
    this.#logger = logger;
  }

  event(event: TurnEvent): undefined {
    if (event.type !== 'tool.result') return;
    logToolFailure(this.#logger, this.#exchange.fields, event);
    (this.#tools ??= new ToolCallList()).add(event);
  }

  paused(pending: readonly ToolCall[]): void {
    this.#paused = approvalList(pending);
  }

  done(text: string, truncated: boolean): void {
    const { agentId, turnId } = this.#exchange;
    const reply: JsonObject = { agent_id: agentId, turn_id: turnId as string, response: text };
    if (truncated) reply['truncated'] = true;
    if (this.#paused !== undefined) reply['pending_approvals'] = this.#paused;
    const tools = this.#tools?.list;
    if (tools !== undefined) reply['tool_calls'] = tools;
    this.#exchange.finish(reply);
  }

  failed(error: unknown): void {
    this.#exchange.fail(error);
  }
}

/**
 * The committed state: at once when the agent can tell without asking
 * storage; else a read bounded as a turn is (504 after turnTimeout, 499 when
 * the client leaves), since a storage that cannot be reached may not say so.
 * The read goes on, shared with whoever asks next.
 */
function answerState(host: DispatchHost, exchange: Exchange, agent: Agent<any>): void {
  const agentId = exchange.agentId;
  const now = agent[servesDirectly] ? agent[committedState]() : undefined;
  if (now !== undefined) return exchange.finish({ agent_id: agentId, state: now });
  exchange.reading = true;
  const cancel = exchange.begin(host.timing);
  // Resolved, not assumed a promise: a subclass's snapshot() may answer synchronously (or throw).
  const snapshot = new Promise((resolve) => resolve(agent.snapshot()));
  const cut = (reason: unknown): void => exchange.fail(reason);
  if (cancel.aborted) return cut(cancel.reason);
  cancel.onAbort(cut);
  snapshot.then(
    (state) => {
      cancel.offAbort(cut);
      exchange.finish({ agent_id: agentId, state: state as JsonObject });
    },
    (error: unknown) => {
      cancel.offAbort(cut);
      exchange.fail(error);
    },
  );
}

function sourceOf(target: Target, exchange: Exchange, message: string, cancel: TurnCancel, typed: boolean): ReplySource {
  if (!('agent' in target)) {
    const remote = target.transport;
    const options = { ...callOptions(target, cancel, exchange), ...turnPolicies(exchange, true) };
    // A typed stream asks the remote for one, so its tool events reach the client as it sent them.
    if (typed && remote instanceof HTTPTransport && remote.stream === HTTPTransport.prototype.stream) {
      return { chunks: remote[typedStream](exchange.agentId, message, options) };
    }
    return { chunks: remote.stream(exchange.agentId, message, options) };
  }
  const agent = target.agent;
  // Pushed straight to the writer, unless a subclass has its own stream() to go through.
  return agent[servesDirectly] ? { agent, message } : { chunks: agent.stream(message, cancelledBy(cancel, exchange.turnId)) };
}

export function callOptions(target: RemoteTarget, cancel: TurnCancel, exchange: Exchange): TransportCallOptions {
  return { signal: cancel.signal, requestId: exchange.requestId, requestHeaders: target.requestHeaders, onTurnId: (id) => exchange.relayTurnId(id), trace: exchange.trace };
}

/**
 * A remote turn's `?on_disconnect=` and (with `whenBusy`) `?when_busy=`, as the client gave them (checked by now):
 * the remote applies them to its turn, as this router does to its own.
 */
export function turnPolicies(exchange: Exchange, whenBusy: boolean): Pick<TransportCallOptions, 'whenBusy' | 'onDisconnect'> {
  const policies: Pick<TransportCallOptions, 'whenBusy' | 'onDisconnect'> = {};
  const busy = whenBusy ? queryParam(exchange.query, 'when_busy') : undefined;
  if (busy !== undefined && busy !== '') policies.whenBusy = busy as WhenBusy;
  const disconnect = queryParam(exchange.query, 'on_disconnect');
  if (disconnect !== undefined && disconnect !== '') policies.onDisconnect = disconnect as OnDisconnect;
  return policies;
}

/**
 * A JSON action on a local agent or a remote (a local agent's own chat turn
 * reports to a ChatReply instead). Resolved, not assumed promises: a
 * transport or subclass of the user's may answer synchronously.
 */
function call(target: Target, exchange: Exchange, action: RouteAction, body: Record<string, unknown>, message: string, cancel: TurnCancel): Promise<JsonObject> {
  const { agentId, turnId } = exchange;
  const remote = 'transport' in target ? target.transport : undefined;
  const options = 'transport' in target ? { ...callOptions(target, cancel, exchange), ...(action === 'state' ? {} : turnPolicies(exchange, true)) } : undefined;
  const agent = 'agent' in target ? target.agent : undefined;
  switch (action) {
    case 'chat': {
      // An HTTPTransport passes on the remote's truncated mark too, unless a subclass has its own chat().
      if (remote instanceof HTTPTransport && remote.chat === HTTPTransport.prototype.chat) {
        return remote[chatReply](agentId, message, options).then((remoteReply) => withTurnId(relayedChat(agentId, remoteReply), exchange.turnId));
      }
      const replying = remote !== undefined ? remote.chat(agentId, message, options) : (agent as Agent<any>).chat(message, cancelledBy(cancel, turnId));
      return Promise.resolve(replying).then((response) => withTurnId({ agent_id: agentId, response }, exchange.turnId));
    }
    case 'invoke': {
      const payload = invokePayload(body);
      const method = payload['method'];
      if (typeof method !== 'string' || method === '') {
        throw httpErrors.badRequest('missing_method', 'Invoke needs a "method" string, e.g. {"method": "increment", "params": {"by": 2}}');
      }
      const params = payload['params'];
      const result = remote !== undefined ? remote.invoke(agentId, method, params, options) : (agent as Agent<any>).invoke(method, params, cancelledBy(cancel, turnId));
      return Promise.resolve(result).then((value) => withTurnId({ agent_id: agentId, result: (value ?? null) as JsonObject }, exchange.turnId));
    }
    default:
      // A local agent's state is answered by answerState, before any turn starts.
      return Promise.resolve((remote as AgentTransport).state(agentId, options)).then((state) => ({ agent_id: agentId, state }));
  }
}

/** A remote's chat reply as this router sends it on (an approval's too). */
export function relayedChat(agentId: string, { response, truncated, toolCalls, pendingApprovals }: RemoteChatReply): JsonObject {
  const reply: JsonObject = { agent_id: agentId, response };
  if (truncated) reply['truncated'] = true;
  if (toolCalls !== undefined) reply['tool_calls'] = toolCalls;
  if (pendingApprovals !== undefined) reply['pending_approvals'] = pendingApprovals;
  return reply;
}

/** `turn_id` right after `agent_id`: the local turn's, or the one a remote sent. */
export function withTurnId(reply: JsonObject, turnId: string | undefined): JsonObject {
  if (turnId === undefined) return reply;
  const { agent_id, ...rest } = reply;
  return { agent_id, turn_id: turnId, ...rest } as JsonObject;
}

/** `?on_disconnect=`: `continue` keeps the turn running when its client leaves, `cancel` cuts it; absent, the router's option. */
export function keepOnDisconnect(value: string | undefined, byDefault: boolean): boolean {
  if (value === undefined || value === '') return byDefault;
  if (value === 'continue') return true;
  if (value === 'cancel') return false;
  throw httpErrors.badRequest('bad_query', 'Query parameter on_disconnect must be cancel or continue');
}
