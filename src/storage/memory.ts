import { VersionConflictError } from '../errors.ts';
import { TurnCancel } from '../agent/cancel.ts';
import { Mailbox } from '../agent/mailbox.ts';
import type { ChatMessage } from '../types.ts';
import type { AgentRecord, Storage, SyncStorage, TurnCommit, Unlock } from './storage.ts';

/** An id locked by one holder with nobody waiting: no queue needed yet. */
const HELD_ALONE: unique symbol = Symbol('held alone');

/**
 * Keeps records in this process's memory. The default storage of an Agent;
 * lost when the process exits. Reads copy, and writes copy all but frozen
 * messages (see storedMessage), so a caller can never mutate what is stored.
 */
export class MemoryStorage implements Storage {
  readonly #records = new Map<string, AgentRecord>();
  /** Each locked id: held with nobody waiting, or a queue once someone waits (most locks are never contended). */
  readonly #locks = new Map<string, Mailbox | typeof HELD_ALONE>();
  /** The state object each agent's last commit was given (not the stored copy). */
  readonly #given = new Map<string, object>();

  readonly sync: SyncStorage = {
    tryLock: (agentId) => this.#tryLock(agentId),
    head: (agentId) => this.#records.get(agentId)?.version ?? 0,
    commit: (agentId, turn) => this.#commit(agentId, turn),
  };

  async load(agentId: string): Promise<AgentRecord | undefined> {
    const record = this.#records.get(agentId);
    return record === undefined ? undefined : structuredClone(record);
  }

  async loadSince(agentId: string, known: { version: number; messages: number }): Promise<AgentRecord | undefined> {
    const record = this.#records.get(agentId);
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
    const mailbox = this.#queueFor(agentId);
    return mailbox.acquire(signal === undefined ? undefined : new TurnCancel(signal)).then(() => {
      const unlock = this.#unlocker(agentId);
      return async () => unlock();
    });
  }

  async delete(agentId: string): Promise<void> {
    this.#records.delete(agentId);
    this.#given.delete(agentId);
  }

  #commit(agentId: string, turn: TurnCommit): number {
    const record = this.#records.get(agentId);
    const version = record?.version ?? 0;
    if (version !== turn.expectedVersion) throw new VersionConflictError(agentId, turn.expectedVersion, version);
    const appended = turn.append.map(storedMessage);
    // A turn that did not change state hands back the object it was given last time: no need to copy it again.
    const state = turn.state === this.#given.get(agentId) && record !== undefined ? record.state : structuredClone(turn.state);
    this.#given.set(agentId, turn.state);
    if (record === undefined) {
      this.#records.set(agentId, { state, messages: appended, version: 1 });
      return 1;
    }
    record.state = state;
    for (const message of appended) record.messages.push(message);
    record.version = version + 1;
    return record.version;
  }

  #tryLock(agentId: string): (() => void) | undefined {
    const current = this.#locks.get(agentId);
    if (current === undefined) {
      this.#locks.set(agentId, HELD_ALONE);
      return this.#unlocker(agentId);
    }
    return current !== HELD_ALONE && current.tryAcquire() ? this.#unlocker(agentId) : undefined;
  }

  /** The id's queue, made when a second caller has to wait (the holder then holds the queue). */
  #queueFor(agentId: string): Mailbox {
    const current = this.#locks.get(agentId);
    if (current !== undefined && current !== HELD_ALONE) return current;
    const mailbox = new Mailbox();
    if (current === HELD_ALONE) mailbox.tryAcquire();
    this.#locks.set(agentId, mailbox);
    return mailbox;
  }

  /** The release of the hold just taken on the id (there is one holder at a time); a second call does nothing. */
  #unlocker(agentId: string): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const current = this.#locks.get(agentId);
      if (current === undefined || current === HELD_ALONE) {
        this.#locks.delete(agentId);
        return;
      }
      current.release();
      if (current.size === 0) this.#locks.delete(agentId);
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
  return Object.isFrozen(message) && (message.usage === undefined || Object.isFrozen(message.usage)) ? message : copyMessage(message);
}

/** Messages are flat records of strings and numbers: a field copy is all a stored copy needs. */
function copyMessage(message: ChatMessage): ChatMessage {
  return message.usage === undefined
    ? { role: message.role, content: message.content }
    : { role: message.role, content: message.content, usage: { ...message.usage } };
}
