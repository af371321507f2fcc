import { AgentRouterError, httpErrors } from '../errors.ts';
import { WHEN_BUSY, type JsonObject, type WhenBusy } from '../types.ts';

/** What the list holds of a request running a turn. */
export interface TurnHolder {
  readonly agentId: string;
  readonly turnId: string | undefined;
  readonly cancel: { abort(reason: unknown): void; readonly aborted: boolean } | undefined;
  /** Its turn is past the agent's gate (and holds a shared storage's lock): not one waiting in line. */
  readonly running: boolean;
  /** Its turn can still be cut: it is not storing its result, nor over (a stream may still be sending its end). */
  readonly cancellable: boolean;
}

/** `?when_busy=`: one of WHEN_BUSY; absent or empty, the router's option. */
export function whenBusyOf(value: string | undefined, byDefault: WhenBusy): WhenBusy {
  if (value === undefined || value === '') return byDefault;
  if ((WHEN_BUSY as readonly string[]).includes(value)) return value as WhenBusy;
  throw httpErrors.badRequest('bad_query', 'Query parameter when_busy must be enqueue, reject or interrupt');
}

// A hint only: how long a turn takes is the model's to say.
const RETRY_AFTER = { 'Retry-After': '1' };

/** `whenBusy: 'reject'` while the agent runs a turn, here or in another process. */
export function agentBusy(agentId: string): AgentRouterError {
  return new AgentRouterError(409, 'agent_busy', `Agent ${JSON.stringify(agentId)} is running a turn; retry shortly`, { expose: true, headers: RETRY_AFTER });
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

  /**
   * whenBusy and maxQueue, for a local turn about to join the agent's:
   * `reject` throws 409 agent_busy, `interrupt` cancels every turn ahead (running or waiting),
   * and past maxQueue waiting turns it is 429 queue_full.
   */
  admit(agentId: string, whenBusy: WhenBusy, maxQueue: number): void {
    // Cancelled turns may still be unwinding: they are not ahead any more.
    const ahead = this.of(agentId).filter((h) => h.cancel !== undefined && !h.cancel.aborted);
    if (ahead.length === 0) return;
    if (whenBusy === 'interrupt') {
      for (const holder of ahead) holder.cancel?.abort(cancelledError(holder.turnId));
      return;
    }
    const id = JSON.stringify(agentId);
    if (whenBusy === 'reject') throw agentBusy(agentId);
    if (ahead.length - 1 >= maxQueue) {
      throw new AgentRouterError(429, 'queue_full', `Agent ${id} has ${ahead.length - 1} turns waiting, its limit (maxQueue); retry shortly`, { expose: true, headers: RETRY_AFTER });
    }
  }

  /**
   * `POST /{agent_id}/cancel`: cancels `turnId`, or the running turn; the reply, or 404 `no_running_turn`
   * (`where`: where none was found, for its message).
   */
  cancel(agentId: string, turnId: string | undefined, where = 'here'): JsonObject {
    const holder = this.of(agentId).find((h) => turnId === undefined || h.turnId === turnId);
    if (holder === undefined || holder.cancel === undefined) {
      throw httpErrors.notFound('no_running_turn', turnId === undefined ? `Agent ${JSON.stringify(agentId)} runs no turn ${where}` : `Agent ${JSON.stringify(agentId)} runs or queues no turn ${JSON.stringify(turnId)} ${where}`);
    }
    if (!holder.cancellable) {
      throw httpErrors.notFound('no_running_turn', `Turn ${JSON.stringify(holder.turnId ?? '')} of agent ${JSON.stringify(agentId)} can no longer be cancelled: it has stored its result, or is storing it`);
    }
    holder.cancel.abort(cancelledError(holder.turnId));
    return { agent_id: agentId, turn_id: holder.turnId ?? null, cancelled: true };
  }
}
