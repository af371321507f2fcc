import { AgentRouterError, httpErrors } from '../errors.ts';
import type { JsonObject } from '../types.ts';

/** What the list holds of a request running a turn. */
export interface TurnHolder {
  readonly agentId: string;
  readonly turnId: string | undefined;
  readonly cancel: { abort(reason: unknown): void } | undefined;
}

/** Why a turn was cancelled: its JSON reply, and its stream's last event. */
export function cancelledError(turnId: string | undefined): AgentRouterError {
  return new AgentRouterError(409, 'cancelled', `Turn ${JSON.stringify(turnId ?? '')} was cancelled`, { expose: true });
}

/**
 * The turns this router runs or queues now, per agent, oldest first (the
 * gate lets them in in that order): what cancel, whenBusy and maxQueue see.
 */
export class AgentTurns<T extends TurnHolder> {
  readonly #byAgent = new Map<string, T[]>();

  add(holder: T): void {
    const list = this.#byAgent.get(holder.agentId);
    if (list === undefined) this.#byAgent.set(holder.agentId, [holder]);
    else list.push(holder);
  }

  delete(holder: T): void {
    const list = this.#byAgent.get(holder.agentId);
    if (list === undefined) return;
    const at = list.indexOf(holder);
    if (at !== -1) list.splice(at, 1);
    if (list.length === 0) this.#byAgent.delete(holder.agentId);
  }

  /** The agent's turns, running first. */
  of(agentId: string): readonly T[] {
    return this.#byAgent.get(agentId) ?? [];
  }

  /** `POST /{agent_id}/cancel`: cancels `turnId`, or the running turn; the reply, or 404 `no_running_turn`. */
  cancel(agentId: string, turnId: string | undefined): JsonObject {
    const holder = this.of(agentId).find((h) => turnId === undefined || h.turnId === turnId);
    if (holder === undefined || holder.cancel === undefined) {
      throw httpErrors.notFound('no_running_turn', turnId === undefined ? `Agent ${JSON.stringify(agentId)} runs no turn here` : `Agent ${JSON.stringify(agentId)} runs or queues no turn ${JSON.stringify(turnId)} here`);
    }
    holder.cancel.abort(cancelledError(holder.turnId));
    return { agent_id: agentId, turn_id: holder.turnId ?? null, cancelled: true };
  }
}
