import { VersionConflictError } from '../errors.ts';
import { sameRecord } from '../storage/record-version.ts';
import type { Storage } from '../storage/storage.ts';
import type { ChatMessage, JsonObject } from '../types.ts';
import { assertJsonState } from '../lib/json.ts';

/**
 * An agent's copy of its stored record (state, history, version) and the
 * one place that reads and writes it: loads it, catches up with what other
 * instances or processes committed, and commits a turn. Storage is the
 * truth; this copy is only ever as new as the last read or commit.
 */
export class StorageSync<S extends JsonObject> {
  readonly #id: string;
  readonly #storage: Storage;
  /** The state an agent never stored starts from; again after its record was deleted. */
  readonly #initialState: S;
  /** True while an action cut from its turn still runs: the state cannot be trusted until it ends. */
  readonly #actionsRunning: () => boolean;
  state: S;
  /** The committed history. Grows in place with each commit; a reload replaces the array. */
  messages: ChatMessage[] = [];
  version = 0;
  loaded = false;
  #loading: Promise<void> | undefined;
  /** A commit was refused as stale (version_conflict): the next turn reloads whatever storage holds. */
  stale = false;
  /**
   * A turn that ran an action failed: the action may have changed the state
   * in place (`this.state.notes.push(x)`), so the next turn and the next
   * state read take it from storage again before trusting it.
   */
  unsure = false;

  constructor(id: string, storage: Storage, initialState: S, actionsRunning: () => boolean) {
    this.#id = id;
    this.#storage = storage;
    this.#initialState = initialState;
    this.#actionsRunning = actionsRunning;
    this.state = structuredClone(initialState);
  }

  /** Loads the record; the first call does the work, later calls share it, a failed one is tried again next time. */
  load(): Promise<void> {
    this.#loading ??= this.refresh(true).then(
      () => {
        this.loaded = true;
      },
      (error: unknown) => {
        this.#loading = undefined;
        throw error;
      },
    );
    return this.#loading;
  }

  /** The committed state when it can be told without asking storage (an in-process storage holding nothing newer). */
  committedNow(): S | undefined {
    const sync = this.#storage.sync;
    return this.loaded && !this.unsure && sync !== undefined && sync.head(this.#id) === this.version ? this.state : undefined;
  }

  /** The storage's own lock for this id, where it has one: the sync side first, so a free lock asks for no signal. */
  async lock(signal: () => AbortSignal): Promise<() => void | Promise<void>> {
    const storage = this.#storage;
    const unlock = storage.sync?.tryLock(this.#id) ?? (await storage.lock?.(this.#id, signal()));
    return unlock ?? (() => undefined);
  }

  /**
   * Reloads from storage when forced, or when storage holds another version
   * than this copy: a newer one (another process wrote), an older one or
   * none (deleted or restored), or any after a refused commit.
   */
  async refresh(force: boolean): Promise<void> {
    if (this.unsure && !force && !this.stale && (await this.#restoreState())) return;
    const storage = this.#storage;
    // Taken as storage has it, even older than this copy: nothing here is newer than what storage holds.
    let takeAny = force || this.stale;
    if (!takeAny) {
      const sync = storage.sync;
      const head = sync !== undefined ? sync.head(this.#id) : await storage.head?.(this.#id);
      if (head === undefined || head === this.version) return;
      // Older, or another record: deleted and made again since this copy was read (record-version.ts).
      takeAny = head < this.version || (head !== 0 && this.version !== 0 && !sameRecord(head, this.version));
      if (!takeAny && storage.loadSince !== undefined && this.version > 0) {
        if (await this.#catchUp()) return;
        takeAny = true;
      }
    }
    const record = await storage.load(this.#id);
    if (takeAny) {
      this.stale = false;
      const unsure = this.unsure;
      // Taken from storage below, whatever it holds: trusted again, unless a cut action still runs.
      if (!this.#actionsRunning()) this.unsure = false;
      if (record === undefined) {
        // Deleted: start over as a new instance would; from the initial state again after a failed action.
        if (this.version !== 0 || unsure) this.#reset();
        return;
      }
    } else if (record === undefined || (record.version <= this.version && sameRecord(record.version, this.version))) {
      return;
    }
    this.state = record.state as S;
    // A new array (the storage's own is not pushed onto) of frozen messages, as those the agent writes.
    this.messages = record.messages.map(frozenMessage);
    this.version = record.version;
  }

  /** Reads only the turns this copy missed; false when storage holds another record, so the caller reloads it whole. */
  async #catchUp(): Promise<boolean> {
    const known = { version: this.version, messages: this.messages.length };
    const tail = await (this.#storage.loadSince as NonNullable<Storage['loadSince']>)(this.#id, known);
    if (tail === undefined || !sameRecord(tail.version, known.version)) return false;
    if (tail.version <= this.version) return true;
    // Something else moved this copy on meanwhile: its history is no longer `known`.
    if (this.version !== known.version || this.messages.length !== known.messages) return false;
    this.state = tail.state as S;
    for (const message of tail.messages) this.messages.push(frozenMessage(message));
    this.version = tail.version;
    return true;
  }

  /**
   * After a failed action: the committed state again, as storage holds it
   * (history is kept: no user code can change it). False when storage holds
   * another record or version: then `stale` is set, and the caller reloads.
   */
  async #restoreState(): Promise<boolean> {
    const version = this.version;
    const storage = this.#storage;
    const known = { version, messages: this.messages.length };
    const record = version > 0 && storage.loadSince !== undefined ? await storage.loadSince(this.#id, known) : await storage.load(this.#id);
    // Another read restored it meanwhile; taken again now, it could undo a running turn's in-place change.
    if (!this.unsure) return true;
    if (this.version !== version || (record === undefined ? version !== 0 : record.version !== version)) {
      this.stale = true;
      return false;
    }
    this.state = record === undefined ? structuredClone(this.#initialState) : (record.state as S);
    if (!this.#actionsRunning()) this.unsure = false;
    return true;
  }

  #reset(): void {
    this.state = structuredClone(this.#initialState);
    this.messages = [];
    this.version = 0;
  }

  /**
   * Writes one turn (its state, the messages it adds) over the version it
   * started from, then takes it into this copy. Nothing to write (same
   * state, no message) writes nothing. A copy reloaded under the turn (a
   * state read caught up with another writer) makes the commit a conflict.
   * A promise only when the storage answers asynchronously (see Storage.sync).
   */
  commit(state: S, append: ChatMessage[], expectedVersion: number): Promise<void> | undefined {
    if (state === this.state && append.length === 0) return undefined;
    if (state !== this.state) assertJsonState(state, `Agent ${JSON.stringify(this.#id)}: state`);
    // S is JSON by its bound and by assertJsonState; the bound is structural, so it takes the cast.
    const turn = { expectedVersion, state: state as JsonObject, append };
    const refused = (error: unknown): never => {
      // This copy is behind (or ahead of) storage: the next turn reloads, so one 409 is not followed by more.
      if (error instanceof VersionConflictError) this.stale = true;
      throw error;
    };
    const sync = this.#storage.sync;
    if (sync === undefined) return this.#storage.commit(this.#id, turn).then((version) => this.#take(turn, version), refused);
    let version: number;
    try {
      version = sync.commit(this.#id, turn);
    } catch (error) {
      return refused(error);
    }
    this.#take(turn, version);
    return undefined;
  }

  /** A commit storage took, into this copy; unless a concurrent snapshot() already reloaded it. */
  #take(turn: { expectedVersion: number; state: JsonObject; append: readonly ChatMessage[] }, version: number): void {
    if (this.version !== turn.expectedVersion) return;
    this.state = turn.state as S;
    for (const message of turn.append) this.messages.push(message);
    this.version = version;
  }

  /**
   * The storage's lock, taken at once, when this copy is known current without waiting: an in-process
   * storage (Storage.sync) holding this very version, its lock free. Undefined otherwise (then lock and refresh).
   */
  lockNow(): (() => void) | undefined {
    const sync = this.#storage.sync;
    if (sync === undefined || !this.loaded || this.stale || this.unsure) return undefined;
    const unlock = sync.tryLock(this.#id);
    if (unlock !== undefined && sync.head(this.#id) === this.version) return unlock;
    unlock?.();
    return undefined;
  }
}

/** A message read from storage, frozen as every message the agent writes, so a model cannot rewrite history. */
export function frozenMessage(message: ChatMessage): ChatMessage {
  if (message.usage !== undefined) Object.freeze(message.usage);
  return Object.freeze(message);
}
