import { httpErrors, statusOf } from '../errors.ts';
import { HTTPTransport } from '../transports/http.ts';
import { isTransport } from '../transports/transport.ts';
import { callOptions, sharedChannelOf, type DispatchHost } from './dispatch.ts';
import type { Exchange } from './exchange.ts';
import type { TurnChannel } from '../storage/turn-channel.ts';
import { requestIdOf } from './payload.ts';

/**
 * `POST /{agent_id}/cancel`: a local agent's turn is cancelled here; a
 * remote agent's by its own server, through HTTPTransport. `target` is what
 * the registry serves the id with (undefined for a single agent's router).
 */
export function cancelTurn(host: DispatchHost, exchange: Exchange, target: unknown, turnId: string | undefined): void {
  if (!isTransport(target)) return cancelLocal(host, exchange, turnId);
  if (!(target instanceof HTTPTransport)) {
    throw httpErrors.notFound('no_running_turn', `Agent ${JSON.stringify(exchange.agentId)} is served by a transport of your own, which cannot cancel its turns`);
  }
  const cancel = exchange.begin(false);
  const options = callOptions({ transport: target, requestId: requestIdOf(exchange.req), requestHeaders: exchange.req.headers }, cancel, exchange);
  target.cancel(exchange.agentId, turnId, options).then(
    (reply) => exchange.finish(reply, 202),
    (error: unknown) => exchange.fail(error),
  );
}

/**
 * A local agent's turn: cancelled here when this process holds it; with a
 * storage shared by processes, else in the process that does.
 */
function cancelLocal(host: DispatchHost, exchange: Exchange, turnId: string | undefined): void {
  const { agentId } = exchange;
  // Held here: cancelled here, with no instance looked up. Without turn_id, only a turn past the gate: one
  // queued here may wait behind a turn that runs in another process.
  const here = host.agentTurns.of(agentId).find((h) => h.cancel !== undefined && !h.cancel.aborted && (turnId === undefined ? h.running : h.turnId === turnId));
  if (here !== undefined) return exchange.finish(host.agentTurns.cancel(agentId, here.turnId), 202);
  let channel: TurnChannel | undefined;
  try {
    channel = sharedChannelOf(host, exchange);
  } catch (error) {
    // An id no pattern serves runs no turn: the 404 says so, as for any other.
    if (statusOf(error) !== 404) throw error;
  }
  if (channel === undefined) return exchange.finish(host.agentTurns.cancel(agentId, turnId), 202);
  exchange.begin(false);
  host.shared.cancelElsewhere(channel, agentId, turnId === undefined ? { running: true } : { turnId }).then(
    (ids) => {
      if (ids.length > 0) return exchange.finish({ agent_id: agentId, turn_id: ids[0] as string, cancelled: true }, 202);
      try {
        // None runs anywhere: a turn queued here is the next to.
        exchange.finish(host.agentTurns.cancel(agentId, turnId, 'in any process sharing its storage'), 202);
      } catch (error) {
        exchange.fail(error);
      }
    },
    (error: unknown) => exchange.fail(error),
  );
}
