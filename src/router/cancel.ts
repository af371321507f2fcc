import { httpErrors } from '../errors.ts';
import { HTTPTransport } from '../transports/http.ts';
import { isTransport } from '../transports/transport.ts';
import { callOptions, type DispatchHost } from './dispatch.ts';
import type { Exchange } from './exchange.ts';
import { requestIdOf } from './payload.ts';

/**
 * `POST /{agent_id}/cancel`: a local agent's turn is cancelled here; a
 * remote agent's by its own server, through HTTPTransport. `target` is what
 * the registry serves the id with (undefined for a single agent's router).
 */
export function cancelTurn(host: DispatchHost, exchange: Exchange, target: unknown, turnId: string | undefined): void {
  if (!isTransport(target)) return exchange.finish(host.agentTurns.cancel(exchange.agentId, turnId), 202);
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
