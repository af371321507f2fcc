import { mkdir, stat, unlink } from 'node:fs/promises';
import path from 'node:path';
import { LockLostError, VersionConflictError } from '../errors.ts';
import { checkTurn } from './check.ts';
import { appendLine, NO_FILE, readAt, readSince, readView, readWhole, replaceFile, syncDir, withIdentity } from './file-io.ts';
import type { CachedView } from './file-io.ts';
import { commitLine, EMPTY_VIEW, messagesBytes, scanJournal, snapshotLine } from './file-journal.ts';
import type { ParsedJournal } from './file-journal.ts';
import { journalBaseName } from './file-names.ts';
import { fileSettings, type FileStorageOptions } from './file-options.ts';
import { FileLease } from './file-lock.ts';
import { sweepLeftovers } from './file-sweep.ts';
import type { LeaseSettings } from './file-lock.ts';
import { rethrowOutage } from './outage.ts';
import { firstVersion } from './record-version.ts';
import type { AgentRecord, Storage, TurnCommit, Unlock } from './storage.ts';
import { KeyedMutex } from './wait.ts';

export type { FileStorageOptions } from './file-options.ts';

/** Views kept per storage; past this the oldest is re-read from disk when next needed. */
const MAX_CACHED_VIEWS = 10_000;

/**
 * Durable storage in a directory, with no dependency: the CLI's default.
 * Each agent id has a journal of JSON lines (see file-journal.ts), appended
 * once per turn and compacted now and then, so a turn never rewrites the
 * history. File names derive from a hash of the id (see file-names.ts), so
 * no id can leave the directory or share a file with another id.
 *
 * Inside a process, operations on one id run one at a time. Across
 * processes sharing the directory (on one host: leases compare its clock,
 * and a dead holder is recognised by its pid), `lock` takes a lock file per
 * id (created exclusively, with a lease; see file-lock.ts), and `commit`
 * writes under that lock, taking it briefly when the caller did not, so its
 * version check holds across processes too. Network file systems are not
 * supported.
 *
 * @example
 * const storage = new FileStorage('./data/agents');
 * const bot = new Agent('bot', { model: echoModel(), storage });
 */
export class FileStorage implements Storage {
  /** The directory, resolved to an absolute path. */
  readonly dir: string;
  readonly #fsync: boolean;
  readonly #lease: LeaseSettings;
  readonly #compactAfterBytes: number;
  /** One operation per id at a time in this process. */
  readonly #io = new KeyedMutex();
  /** One `lock` holder per id in this instance; waiters queue here instead of polling the lock file. */
  readonly #turns = new KeyedMutex();
  readonly #held = new Map<string, FileLease>();
  readonly #views = new Map<string, CachedView>();
  /** Ids whose journal a failed commit took a line back from, to be written again as another record (see #append). */
  readonly #renumber = new Set<string>();
  readonly #pending = new Set<Promise<unknown>>();
  #ready: Promise<void> | undefined;
  /** What every operation's failure goes through: a disk that fails, is full or read-only becomes 503 storage_unavailable. */
  readonly #outage = rethrowOutage('FileStorage');

  constructor(dir: string, options: FileStorageOptions = {}) {
    if (typeof dir !== 'string' || dir === '') throw new TypeError('FileStorage: dir must be a directory path, e.g. new FileStorage("./data")');
    const settings = fileSettings(options);
    this.dir = path.resolve(dir);
    this.#fsync = settings.fsync;
    this.#lease = settings.lease;
    this.#compactAfterBytes = settings.compactAfterBytes;
  }

  async load(agentId: string): Promise<AgentRecord | undefined> {
    checkId(agentId);
    return this.#op(agentId, async () => {
      const journal = await this.#readFull(agentId);
      if (journal === undefined || journal.version === 0) return undefined;
      return { state: journal.state, messages: journal.messages, version: journal.version };
    });
  }

  /**
   * The turns committed after `known` (by another process, as a rule), for
   * an instance catching up: read from where this storage's last read of the
   * journal ended, so its cost is those turns' lines, not the history's. The
   * whole file is read instead when it was compacted meanwhile, or read
   * from another version.
   */
  async loadSince(agentId: string, known: { version: number; messages: number }): Promise<AgentRecord | undefined> {
    checkId(agentId);
    return this.#op(agentId, async () => {
      const view = await this.#refresh(agentId);
      if (view === NO_FILE) return undefined;
      const file = this.#journalPath(agentId);
      const since = view.since;
      if (since !== undefined && since.version === known.version && view.version > known.version) {
        const bytes = await readSince(file, view, since.validBytes);
        const from = { ...EMPTY_VIEW, version: since.version, validBytes: since.validBytes };
        const tail = bytes === undefined ? undefined : scanJournal(bytes, { agentId, file, from, collect: true });
        if (tail !== undefined && tail.version === view.version) return { state: tail.state, messages: tail.messages, version: tail.version };
      }
      const journal = await this.#readFull(agentId);
      if (journal === undefined || journal.version === 0) return undefined;
      return { state: journal.state, messages: journal.messages.slice(known.messages), version: journal.version };
    });
  }

  async head(agentId: string): Promise<number> {
    checkId(agentId);
    return this.#op(agentId, async () => (await this.#refresh(agentId)).version);
  }

  async commit(agentId: string, turn: TurnCommit): Promise<number> {
    checkId(agentId);
    checkTurn(turn, 'FileStorage');
    const stateJson = JSON.stringify(turn.state);
    const view = await this.#op(agentId, () => this.#underLock(agentId, 'wait', () => this.#append(agentId, turn, stateJson)));
    if (view.staleBytes >= this.#compactAfterBytes && view.staleBytes * 2 >= view.validBytes) {
      // In the background: the turn is durable already, and compaction is
      // only an optimization (a failed one leaves a valid journal behind).
      void this.#track(this.compact(agentId).catch(() => false));
    }
    return view.version;
  }

  /** Takes this id's lock for a turn; see FileStorageOptions.leaseSeconds. */
  lock(agentId: string, signal?: AbortSignal): Promise<Unlock> {
    return this.#lock(agentId, signal).catch(this.#outage);
  }

  async #lock(agentId: string, signal?: AbortSignal): Promise<Unlock> {
    checkId(agentId);
    await this.#ensureDir();
    const releaseTurn = await this.#turns.acquire(agentId, signal);
    let lease: FileLease;
    try {
      lease = await FileLease.acquire(this.#lockPath(agentId), this.#lease, signal).catch(async (error: unknown) => {
        if (!(await this.#dirWasRemoved(error))) throw error;
        return FileLease.acquire(this.#lockPath(agentId), this.#lease, signal);
      });
    } catch (error) {
      releaseTurn();
      throw error;
    }
    this.#held.set(agentId, lease);
    let unlocked = false;
    return async () => {
      if (unlocked) return;
      unlocked = true;
      try {
        // Through the id's queue: a commit or compaction under this lock finishes first.
        await this.#op(agentId, async () => {
          if (this.#held.get(agentId) === lease) this.#held.delete(agentId);
          await lease.release();
        });
      } finally {
        releaseTurn();
      }
    };
  }

  async delete(agentId: string): Promise<void> {
    checkId(agentId);
    await this.#op(agentId, () =>
      this.#underLock(agentId, 'wait', async () => {
        this.#views.delete(agentId);
        // A compaction snapshot a crash left behind holds the conversation too.
        await sweepLeftovers(this.dir, journalBaseName(agentId));
        try {
          await unlink(this.#journalPath(agentId));
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
          throw error;
        }
        if (this.#fsync) await syncDir(this.dir);
      }),
    );
  }

  /**
   * Rewrites one journal as a single snapshot line (temp file, flush, rename,
   * flush the directory). Runs on its own now and then; call it to compact
   * at a time of your choosing. Resolves false when there was nothing to
   * compact or another process held the id's lock.
   */
  async compact(agentId: string): Promise<boolean> {
    checkId(agentId);
    return this.#op(agentId, async () => {
      const done = await this.#underLock(agentId, 'try', async () => {
        return this.#snapshot(agentId);
      });
      return done === true;
    });
  }

  /** Waits for background work (compaction), releases held locks and forgets cached views. */
  async close(): Promise<void> {
    while (this.#pending.size > 0) await Promise.allSettled([...this.#pending]);
    for (const [agentId, lease] of this.#held) {
      this.#held.delete(agentId);
      await lease.release();
    }
    this.#views.clear();
  }

  // --- internals -----------------------------------------------------------

  /** Rewrites the journal as one snapshot line, at `version` if given; false when there is no record. */
  async #snapshot(agentId: string, version?: number): Promise<boolean> {
    const read = await this.#readFull(agentId);
    if (read === undefined || read.version === 0) return false;
    const journal = version === undefined ? read : { ...read, version };
    const info = await replaceFile(this.#journalPath(agentId), snapshotLine(agentId, journal));
    const stateBytes = Number(info.size) - messagesBytes(journal.messages);
    this.#remember(agentId, withIdentity({ version: journal.version, validBytes: Number(info.size), stateBytes, staleBytes: 0 }, info));
    return true;
  }

  #journalPath(agentId: string): string {
    return path.join(this.dir, `${journalBaseName(agentId)}.jsonl`);
  }

  #lockPath(agentId: string): string {
    return path.join(this.dir, `${journalBaseName(agentId)}.lock`);
  }

  #ensureDir(): Promise<void> {
    // 0700: the journals hold conversations (see file-io.ts). An existing directory keeps its mode.
    // Once per storage, what killed processes left there is swept (one directory listing).
    this.#ready ??= mkdir(this.dir, { recursive: true, mode: 0o700 }).then(
      () => sweepLeftovers(this.dir).then(() => undefined),
      (error: unknown) => {
        this.#ready = undefined;
        throw error;
      },
    );
    return this.#ready;
  }

  #op<T>(agentId: string, work: () => Promise<T>): Promise<T> {
    const run = (): Promise<T> => this.#ensureDir().then(() => this.#io.run(agentId, work));
    // Run once more after the directory was made again: a write that met ENOENT wrote nothing.
    const again = async (error: unknown): Promise<T> => {
      if (!(await this.#dirWasRemoved(error))) throw error;
      return run();
    };
    return this.#track(run().catch(again).catch(this.#outage));
  }

  /**
   * True when `error` is an ENOENT because the directory itself was removed
   * under a running storage (a cleanup job, a test); it is then made again,
   * instead of every operation failing until a restart.
   */
  async #dirWasRemoved(error: unknown): Promise<boolean> {
    if ((error as NodeJS.ErrnoException | undefined)?.code !== 'ENOENT') return false;
    if (await stat(this.dir).then(() => true, () => false)) return false;
    this.#ready = undefined;
    await this.#ensureDir();
    return true;
  }

  #track<T>(promise: Promise<T>): Promise<T> {
    this.#pending.add(promise);
    const forget = (): void => {
      this.#pending.delete(promise);
    };
    promise.then(forget, forget);
    return promise;
  }

  /**
   * Runs a write under the id's cross-process lock: the caller's own when it
   * still holds it, else one taken for this write ('wait'), or only if free
   * at once ('try': resolves `undefined` when busy).
   */
  async #underLock<T>(agentId: string, mode: 'wait', work: () => Promise<T>): Promise<T>;
  async #underLock<T>(agentId: string, mode: 'try', work: () => Promise<T>): Promise<T | undefined>;
  async #underLock<T>(agentId: string, mode: 'wait' | 'try', work: () => Promise<T>): Promise<T | undefined> {
    const held = this.#held.get(agentId);
    if (held?.isHeld() === true) return work();
    const lockPath = this.#lockPath(agentId);
    const lease = mode === 'wait' ? await FileLease.acquire(lockPath, this.#lease) : await FileLease.tryAcquire(lockPath, this.#lease);
    if (lease === undefined) return undefined;
    try {
      return await work();
    } finally {
      await lease.release();
    }
  }

  async #append(agentId: string, turn: TurnCommit, stateJson: string): Promise<CachedView> {
    let view = await this.#refresh(agentId);
    if (view.version !== turn.expectedVersion) throw new VersionConflictError(agentId, turn.expectedVersion, view.version);
    if (this.#renumber.has(agentId)) {
      // Not done when the line was taken back (the disk failed again): done before its version is used again.
      await this.#snapshot(agentId, firstVersion());
      this.#renumber.delete(agentId);
      view = await this.#refresh(agentId);
    }
    const first = view.validBytes === 0;
    const version = view.version === 0 ? firstVersion() : view.version + 1;
    const line = commitLine(first ? agentId : undefined, version, stateJson, turn.append);
    const file = this.#journalPath(agentId);
    let tookBack = false;
    let info: Awaited<ReturnType<typeof appendLine>>;
    try {
      info = await appendLine(file, view, line, this.#fsync, () => (tookBack = true));
    } catch (error) {
      // Another process may have read the taken-back line and would take this version's next commit for the one it has:
      // written again as another record (record-version.ts), the journal is one every reader loads whole.
      if (tookBack) {
        this.#renumber.add(agentId);
        await this.#snapshot(agentId, firstVersion()).then(() => this.#renumber.delete(agentId), () => undefined);
      }
      throw error;
    }
    const lineBytes = Buffer.byteLength(line);
    if (info.size !== BigInt(view.validBytes + lineBytes) && (await readAt(file, view.validBytes, lineBytes))?.toString('utf8') !== line) {
      // Another process appended first: this process's lease had run out (it stalled), and the other
      // took the lock. Readers take the first line of each version, so this one is ignored: refused.
      throw new LockLostError(agentId, 'FileStorage', 'its lease ran out and another process wrote this version first');
    }
    if (first && this.#fsync) await syncDir(this.dir);
    const next = { version, validBytes: Number(info.size), stateBytes: lineBytes - messagesBytes(turn.append), staleBytes: view.staleBytes + view.stateBytes };
    return this.#remember(agentId, withIdentity(next, info));
  }

  /** The journal's view, from the cache when the file is unchanged, else reading only what was appended. */
  async #refresh(agentId: string): Promise<CachedView> {
    const view = await readView(this.#journalPath(agentId), agentId, this.#views.get(agentId));
    if (view === NO_FILE) {
      this.#views.delete(agentId);
      return view;
    }
    return this.#remember(agentId, view);
  }

  async #readFull(agentId: string): Promise<ParsedJournal | undefined> {
    const read = await readWhole(this.#journalPath(agentId), agentId);
    if (read === undefined) {
      this.#views.delete(agentId);
      return undefined;
    }
    this.#remember(agentId, read.view);
    return read.journal;
  }

  #remember(agentId: string, view: CachedView): CachedView {
    this.#views.delete(agentId);
    this.#views.set(agentId, view);
    if (this.#views.size > MAX_CACHED_VIEWS) {
      const oldest = this.#views.keys().next().value;
      if (oldest !== undefined) this.#views.delete(oldest);
    }
    return view;
  }
}

function checkId(agentId: string): void {
  if (typeof agentId !== 'string') throw new TypeError(`FileStorage: agent id must be a string, got ${typeof agentId}`);
}
