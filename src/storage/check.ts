import type { TurnCommit } from './storage.ts';

/**
 * Checks a commit's shape before anything is written, so a caller's mistake
 * is a TypeError naming the fix rather than a half-understood row or line.
 */
export function checkTurn(turn: TurnCommit, backend: string): void {
  if (typeof turn !== 'object' || turn === null) {
    throw new TypeError(`${backend}.commit: pass { expectedVersion, state, append }, got ${turn === null ? 'null' : typeof turn}`);
  }
  const { expectedVersion, state, append } = turn;
  if (typeof expectedVersion !== 'number' || !Number.isSafeInteger(expectedVersion) || expectedVersion < 0) {
    throw new TypeError(`${backend}.commit: expectedVersion must be an integer >= 0 (0 for an agent never stored)`);
  }
  if (typeof state !== 'object' || state === null || Array.isArray(state)) {
    throw new TypeError(`${backend}.commit: state must be a plain object, e.g. { count: 0 }`);
  }
  if (!Array.isArray(append)) {
    throw new TypeError(`${backend}.commit: append must be an array of messages (empty for a turn that adds none)`);
  }
}
