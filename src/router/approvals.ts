import { cancelledBy, chatTurn, type Agent } from '../agent/agent.ts';
import { approvalList, parseDecisions, type ApprovalDecision } from '../agent/approvals.ts';
import { AgentRouterError } from '../errors.ts';
import { parseStreamFlag, queryParam } from '../http/path.ts';
import type { JsonObject } from '../types.ts';
import { callOptions, ChatReply, keepOnDisconnect, openTurnStream, refuseIfClientGone, relayedChat, turnPolicies, withTurnId, type DispatchHost, type RemoteTarget } from './dispatch.ts';
import { approvalsCall, HTTPTransport, type RemoteChatReply, type TypedChunkStream } from '../transports/http.ts';
import type { Exchange } from './exchange.ts';
import { streamUI } from './ui-stream.ts';
import { streamReply } from './stream.ts';

/**
 * `GET /{agent_id}/approvals` lists the calls a paused turn waits on;
 * `POST` decides them and resumes the turn as a new turn through the
 * agent's gate, answered as a chat turn is (JSON, or SSE with `?stream=`).
 */
export function dispatchApprovals(host: DispatchHost, exchange: Exchange, action: 'approvals' | 'approve', body: Record<string, unknown>): void {
  const { req, res, agentId } = exchange;
  refuseIfClientGone(res);
  if (host.shut !== undefined) throw host.shut.reason;
  let decisions: ApprovalDecision[] | undefined;
  let stream: boolean | 'events' | 'ui' = false;
  if (action === 'approve') {
    decisions = parseDecisions(body['decisions']);
    stream = parseStreamFlag(queryParam(exchange.query, 'stream'), req.headers.accept);
    if (stream !== false) host.checkStreams();
  }
  const target = host.resolve(agentId, req);
  exchange.pooled = 'agent' in target && target.pooled;
  if (!('agent' in target)) return relayApprovals(host, exchange, target, decisions, stream);
  if (decisions === undefined) return listPending(host, exchange, target.agent);
  const keep = keepOnDisconnect(queryParam(exchange.query, 'on_disconnect'), host.keepOnDisconnect);
  const cancel = exchange.begin(host.timing, keep);
  const turnId = exchange.newTurnId();
  host.agentTurns.add(exchange);
  const channel = target.agent.storage.turns;
  if (channel !== undefined) host.shared.listen(channel);
  if (stream !== false) {
    const options = { ...host.streamOptions, typed: stream === 'events', cancel, keep };
    return openTurnStream(host, exchange, stream, { agent: target.agent, message: '', decisions }, options, channel);
  }
  target.agent[chatTurn]('', cancelledBy(cancel, turnId), new ChatReply(exchange, host.logger), decisions);
}

/** The pending calls as storage holds them now (another process may have paused or resumed the turn); bounded as a state read. */
function listPending(host: DispatchHost, exchange: Exchange, agent: Agent<any>): void {
  exchange.reading = true;
  const cancel = exchange.begin(host.timing);
  const cut = (reason: unknown): void => exchange.fail(reason);
  if (cancel.aborted) return cut(cancel.reason);
  cancel.onAbort(cut);
  new Promise((resolve) => resolve(agent.snapshot())).then(
    () => {
      cancel.offAbort(cut);
      exchange.finish({ agent_id: exchange.agentId, pending_approvals: approvalList(agent.pendingApprovals) });
    },
    (error: unknown) => {
      cancel.offAbort(cut);
      exchange.fail(error);
    },
  );
}

/** A remote agent's approvals, relayed through its HTTPTransport as chat is; another transport has no such route (501). */
function relayApprovals(host: DispatchHost, exchange: Exchange, target: RemoteTarget, decisions: ApprovalDecision[] | undefined, stream: boolean | 'events' | 'ui'): void {
  const remote = target.transport;
  if (!(remote instanceof HTTPTransport)) {
    const message = `Agent ${JSON.stringify(exchange.agentId)} is served by a transport of your own, which has no approvals route (HTTPTransport relays them)`;
    throw new AgentRouterError(501, 'not_implemented', message, { expose: true });
  }
  const keep = keepOnDisconnect(queryParam(exchange.query, 'on_disconnect'), host.keepOnDisconnect);
  const cancel = exchange.begin(false, keep);
  // No when_busy: this router applies none to an approval turn, so it sends none on.
  const options = { ...callOptions(target, cancel, exchange), ...turnPolicies(exchange, false) };
  const agentId = exchange.agentId;
  if (decisions !== undefined && stream !== false) {
    host.openStream();
    exchange.streaming = true;
    // The ui mode asks the remote for its typed stream, as chat does: its tool events become tool parts.
    const chunks = remote[approvalsCall](agentId, decisions, stream === 'ui' ? 'events' : stream, options) as TypedChunkStream;
    return (stream === 'ui' ? streamUI : streamReply)(exchange.res, agentId, { chunks }, { ...host.streamOptions, typed: stream === 'events', cancel, keep }, exchange);
  }
  const replying = decisions === undefined
    ? (remote[approvalsCall](agentId, undefined, false, options) as Promise<JsonObject>).then((list) => ({ ...list, agent_id: agentId }))
    : (remote[approvalsCall](agentId, decisions, false, options) as Promise<RemoteChatReply>).then((reply) => withTurnId(relayedChat(agentId, reply), exchange.turnId));
  replying.then((reply) => exchange.finish(reply), (error: unknown) => exchange.fail(error));
}
