/** A JSON reply without its `turn_id` (a fresh random id per turn), for tests about the rest of it. */
export function noTurnId<T>(reply: T): T {
  if (typeof reply !== 'object' || reply === null || !('turn_id' in reply)) return reply;
  const { turn_id: _turnId, ...rest } = reply as Record<string, unknown>;
  return rest as T;
}
