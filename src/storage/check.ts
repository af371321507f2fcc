import { AgentRouterError } from '../errors.ts';
import type { AgentRecord, TurnCommit } from './storage.ts';

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
  // The same rule as reads apply (checkRecord, the journal's lines): what is written can be read back.
  const bad = append.findIndex((message) => !isMessage(message));
  if (bad !== -1) throw new TypeError(`${backend}.commit: append[${bad}] must be a message { role: string, content: string }`);
}

/** A history entry as storages keep it: `{role, content}` strings (and any other JSON fields, such as usage). */
export function isMessage(value: unknown): boolean {
  if (typeof value !== 'object' || value === null) return false;
  const { role, content } = value as { role?: unknown; content?: unknown };
  return typeof role === 'string' && typeof content === 'string';
}

/**
 * Checks a record read from a shared store (a row, keys) before an agent
 * takes it: one edited or damaged by hand is refused as `storage_corrupt`
 * (500, naming the id and what is wrong) on every read, rather than served
 * by GET state and then failing each turn with an error about the caller's
 * commit.
 */
export function checkRecord(record: AgentRecord, agentId: string, backend: string): AgentRecord {
  const { state, messages, version } = record;
  const wrong =
    !Number.isSafeInteger(version) || version < 1 ? `its version (${String(version)}) is not an integer >= 1`
    : typeof state !== 'object' || state === null || Array.isArray(state) ? 'its state is not a JSON object'
    : !Array.isArray(messages) ? 'its history is not a list'
    : messages.findIndex((message) => !isMessage(message));
  if (wrong === -1) return record;
  throw damagedRecord(agentId, backend, typeof wrong === 'number' ? `history entry ${wrong} is not a {role, content} message` : wrong);
}

export function damagedRecord(agentId: string, backend: string, what: string): AgentRouterError {
  return new AgentRouterError(500, 'storage_corrupt', `${backend}: the stored record of agent ${JSON.stringify(agentId)} is damaged: ${what}; repair or delete it`);
}
