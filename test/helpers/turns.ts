/** A JSON reply without its `turn_id` (a fresh random id per turn), for tests about the rest of it. */
export function noTurnId<T>(reply: T): T {
  if (typeof reply !== 'object' || reply === null || !('turn_id' in reply)) return reply;
  const { turn_id: _turnId, ...rest } = reply as Record<string, unknown>;
  return rest as T;
}

/** A turn id as the router makes it. */
export const TURN_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * A JSON turn reply's `turn_id`, checked: well formed, right after `agent_id`, and the `Turn-Id` header's
 * value when headers are given. Compare the rest with `noTurnId()`.
 */
export function turnIdOf(body: Record<string, unknown>, headers?: Headers): string {
  const turnId = body['turn_id'];
  if (typeof turnId !== 'string' || !TURN_ID.test(turnId)) throw new Error(`turn_id ${JSON.stringify(turnId)} is not a turn id`);
  const keys = Object.keys(body);
  if (keys[0] !== 'agent_id' || keys[1] !== 'turn_id') throw new Error(`turn_id is not right after agent_id: ${keys.join(',')}`);
  if (headers !== undefined && headers.get('turn-id') !== turnId) throw new Error(`turn_id ${turnId} but Turn-Id ${String(headers.get('turn-id'))}`);
  return turnId;
}
