import { VersionConflictError } from '../errors.ts';
import { TurnCancel } from '../lib/cancel.ts';
import { Mailbox } from '../lib/mailbox.ts';
import type { ChatMessage } from '../types.ts';
import { isMessage } from './check.ts';
import { firstVersion } from './record-version.ts';
import type { AgentRecord, Storage, SyncStorage, TurnCommit, Unlock } from './storage.ts';

/**
 * What MemoryStorage keeps per id: the record and the id's lock, in one map entry, so a turn adds or
 * removes no entry (a lock map costs a JSON chat about 6%: BENCHMARKS.md, "Goals").
 */
interface Slot {
  record: AgentRecord | undefined;
  /** The state object the last commit was given (not the stored copy). */
  given: object | undefined;
  /** Free, held with nobody waiting, or a queue once someone waits (most locks are never contended). */
  lock: typeof FREE | typeof HELD_ALONE | Mailbox;
}

const FREE: unique symbol = Symbol('free');
/** An id locked by one holder with nobody waiting: no queue needed yet. */
const HELD_ALONE: unique symbol = Symbol('held alone');

/**
 * Keeps records in this process's memory. The default storage of an Agent;
 * lost when the process exits. Reads copy, and writes copy all but frozen
 * messages (see storedMessage), so a caller can never mutate what is stored.
 */
export class MemoryStorage implements Storage {
  /** Each id stored or locked now; a slot with neither is dropped. */
  readonly #slots = new Map<string, Slot>();

  readonly sync: SyncStorage = {
    tryLock: (agentId) => this.#tryLock(agentId),
    head: (agentId) => this.#slots.get(agentId)?.record?.version ?? 0,
    commit: (agentId, turn) => this.#commit(agentId, turn),
  };

  async load(agentId: string): Promise<AgentRecord | undefined> {
    const record = this.#slots.get(agentId)?.record;
    return record === undefined ? undefined : structuredClone(record);
  }

  async loadSince(agentId: string, known: { version: number; messages: number }): Promise<AgentRecord | undefined> {
    const record = this.#slots.get(agentId)?.record;
    if (record === undefined) return undefined;
    return structuredClone({ state: record.state, messages: record.messages.slice(known.messages), version: record.version });
  }

  async commit(agentId: string, turn: TurnCommit): Promise<number> {
    return this.#commit(agentId, turn);
  }

  async head(agentId: string): Promise<number> {
    return this.sync.head(agentId);
  }

  /** Serializes turns of agent instances in this process that share one id. */
  lock(agentId: string, signal?: AbortSignal): Promise<Unlock> {
    if (signal?.aborted === true) return Promise.reject(signal.reason);
    const release = this.#tryLock(agentId);
    if (release !== undefined) return Promise.resolve(async () => release());
    const slot = this.#slots.get(agentId) as Slot;
    const mailbox = this.#queueOf(slot);
    return mailbox.acquire(signal === undefined ? undefined : new TurnCancel(signal)).then(() => {
      const unlock = this.#unlocker(agentId, slot);
      return async () => unlock();
    });
  }

  async delete(agentId: string): Promise<void> {
    const slot = this.#slots.get(agentId);
    if (slot === undefined) return;
    slot.record = undefined;
    slot.given = undefined;
    if (slot.lock === FREE) this.#slots.delete(agentId);
  }

  #commit(agentId: string, turn: TurnCommit): number {
    let slot = this.#slots.get(agentId);
    const record = slot?.record;
    const version = record?.version ?? 0;
    if (version !== turn.expectedVersion) throw new VersionConflictError(agentId, turn.expectedVersion, version);
    // The rule the storages that write JSON apply (checkTurn): code tried on memory must not fail on them later.
    const bad = turn.append.findIndex((message) => !isMessage(message));
    if (bad !== -1) throw new TypeError(`MemoryStorage.commit: append[${bad}] must be a message { role: string, content: string }`);
    const appended = turn.append.map(storedMessage);
    // A turn that did not change state hands back the object it was given last time: no need to copy it again.
    const state = turn.state === slot?.given && record !== undefined ? record.state : structuredClone(turn.state);
    if (slot === undefined) {
      slot = { record: undefined, given: undefined, lock: FREE };
      this.#slots.set(agentId, slot);
    }
    slot.given = turn.state;
    if (record === undefined) {
      slot.record = { state, messages: appended, version: firstVersion() };
      return slot.record.version;
    }
    record.state = state;
    for (const message of appended) record.messages.push(message);
    record.version = version + 1;
    return record.version;
  }

  #tryLock(agentId: string): (() => void) | undefined {
    let slot = this.#slots.get(agentId);
    if (slot === undefined) {
      slot = { record: undefined, given: undefined, lock: HELD_ALONE };
      this.#slots.set(agentId, slot);
      return this.#unlocker(agentId, slot);
    }
    const lock = slot.lock;
    if (lock === FREE) slot.lock = HELD_ALONE;
    else if (lock === HELD_ALONE || !lock.tryAcquire()) return undefined;
    return this.#unlocker(agentId, slot);
  }

  /** The slot's queue, made when a second caller has to wait (the holder then holds the queue). */
  #queueOf(slot: Slot): Mailbox {
    const lock = slot.lock;
    if (lock !== FREE && lock !== HELD_ALONE) return lock;
    const mailbox = new Mailbox();
    if (lock === HELD_ALONE) mailbox.tryAcquire();
    slot.lock = mailbox;
    return mailbox;
  }

  /** The release of the hold just taken on the id (there is one holder at a time); a second call does nothing. */
  #unlocker(agentId: string, slot: Slot): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const lock = slot.lock;
      if (lock === HELD_ALONE) slot.lock = FREE;
      else if (lock !== FREE) {
        lock.release();
        if (lock.size > 0) return;
        slot.lock = FREE;
      }
      // Nothing stored (never committed, or deleted meanwhile) and nobody waiting: nothing to keep.
      if (slot.record === undefined && this.#slots.get(agentId) === slot) this.#slots.delete(agentId);
    };
  }
}

/**
 * The message as stored: a frozen one (every message an Agent writes) as it
 * is, shared with the agent's history, since nobody can change it; any other
 * a copy. Keeping one object instead of two per message halves what history
 * costs the garbage collector: each kept message is copied once or twice by
 * the young-generation collector before it settles.
 */
function storedMessage(message: ChatMessage): ChatMessage {
  const frozen = Object.isFrozen(message) && (message.usage === undefined || Object.isFrozen(message.usage));
  return frozen && (message.role !== 'assistant' || message.toolCalls === undefined || (Object.isFrozen(message.toolCalls) && message.toolCalls.every(Object.isFrozen))) ? message : copyMessage(message);
}

/** Messages are flat records of strings and numbers (and an assistant's tool calls): a field copy is all a stored copy needs. */
function copyMessage(message: ChatMessage): ChatMessage {
  if (message.role === 'user') return { role: 'user', content: message.content };
  if (message.role === 'tool') {
    const tool: ChatMessage = { role: 'tool', toolCallId: message.toolCallId, name: message.name, content: message.content };
    if (message.isError === true) tool.isError = true;
    return tool;
  }
  const copy: ChatMessage = { role: 'assistant', content: message.content };
  if (message.usage !== undefined) copy.usage = { ...message.usage };
  if (message.toolCalls !== undefined) copy.toolCalls = message.toolCalls.map((call) => ({ id: call.id, name: call.name, arguments: call.arguments }));
  if (message.truncated === true) copy.truncated = true;
  return copy;
}
