/**
 * A cross-process lock for one journal: a lock file created exclusively
 * (hard-linked into place, or O_EXCL where links are not supported), holding
 * the owner's pid, host, process run, a random token and an expiry. The holder renews the expiry while it holds the lock; a lock whose
 * expiry has passed, or whose owner is a dead process on this host, is stale
 * and the next taker removes it.
 *
 * Honest limits: taking over a stale lock is a rename-then-check, and a
 * renewal is a check-then-rename, so in a window of a few system calls two
 * processes racing on a *stale* lock can both believe they hold it. That is
 * why the lock only serializes turns; correctness rests on the version check
 * at commit, which runs under this lock and in a writer that re-checks its
 * lease first (FileStorage), so a duplicate line is at worst ignored on load.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { link, open, readFile, rename, stat, unlink, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { backoff, delay } from './wait.ts';

export interface LeaseSettings {
  leaseMs: number;
  /** Milliseconds since the epoch; injectable so tests can expire a lease without waiting. */
  now: () => number;
  /** False leaves the expiry alone, as a holder that died would. */
  renew: boolean;
}

interface LockContent {
  pid: number;
  host: string;
  /** Which process of that pid wrote it (absent in lock files of earlier versions). */
  run?: string | undefined;
  token: string;
  expires: number;
}

/**
 * This process among all that had its pid on this host: a container
 * restarted runs as PID 1 again, with its hostname, and must see the lock
 * its killed predecessor left as dead, not as its own. Its start time
 * (Linux's /proc/self/stat, in clock ticks since boot), not a random id:
 * every worker thread, and every copy of this module in the process,
 * must read the same, or one would take another's live lock. Undefined
 * without /proc: a lock with this pid is then taken as this process's.
 */
const PROCESS_RUN = processStartTime();

function processStartTime(): string | undefined {
  try {
    const stat = readFileSync('/proc/self/stat', 'utf8');
    // The fields after the command name, which is in parentheses and may hold spaces; starttime is field 22.
    const start = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
    return start !== undefined && /^\d+$/.test(start) ? start : undefined;
  } catch {
    return undefined;
  }
}

export class FileLease {
  readonly path: string;
  readonly token: string;
  readonly #settings: LeaseSettings;
  #timer: NodeJS.Timeout | undefined;
  #renewing: Promise<void> = Promise.resolve();
  #released = false;
  /** The expiry last written to the lock file. */
  #expires: number;

  private constructor(path: string, token: string, expires: number, settings: LeaseSettings) {
    this.path = path;
    this.token = token;
    this.#expires = expires;
    this.#settings = settings;
    if (settings.renew) {
      // unref: a held lock must not keep a process alive that has nothing else to do.
      this.#timer = setInterval(() => {
        this.#renewing = this.#renew();
      }, Math.max(1, Math.floor(settings.leaseMs / 3))).unref();
    }
  }

  /** Waits until the lock is free (or stale) and takes it; an abort stops the wait. */
  static async acquire(path: string, settings: LeaseSettings, signal?: AbortSignal): Promise<FileLease> {
    for (let attempt = 0; ; attempt++) {
      signal?.throwIfAborted();
      const lease = await FileLease.tryAcquire(path, settings);
      if (lease !== undefined) return lease;
      await delay(backoff(attempt), signal);
    }
  }

  /** Takes the lock if it is free or stale; `undefined` when someone else holds it. */
  static async tryAcquire(path: string, settings: LeaseSettings): Promise<FileLease | undefined> {
    const token = randomUUID();
    for (let round = 0; round < 2; round++) {
      const body = content(token, settings);
      if (await createExclusive(path, body.text)) return new FileLease(path, token, body.expires, settings);
      const stale = await readStale(path, settings);
      if (stale === undefined) return undefined;
      if (stale !== null) await takeOver(path, stale);
    }
    return undefined;
  }

  /**
   * True while this lease has not expired. No other process takes a lock
   * before the expiry written in it (they share this host's clock, or the
   * file's), so this needs no read of the file.
   */
  isHeld(): boolean {
    return !this.#released && this.#expires > this.#settings.now();
  }

  /** Removes the lock file if it is still this lease's. Idempotent. */
  async release(): Promise<void> {
    if (this.#released) return;
    clearInterval(this.#timer);
    await this.#renewing;
    this.#released = true;
    if (await this.#fileIsMine()) await unlink(this.path).catch(ignoreMissing);
  }

  async #fileIsMine(): Promise<boolean> {
    const current = parse(await readFile(this.path, 'utf8').catch(() => ''));
    return current?.token === this.token;
  }

  async #renew(): Promise<void> {
    try {
      if (!this.isHeld() || !(await this.#fileIsMine())) {
        clearInterval(this.#timer);
        return;
      }
      // Write aside, then rename: a reader never sees a half-written lock file.
      const next = `${this.path}.${this.token}.renew`;
      const body = content(this.token, this.#settings);
      await writeFile(next, body.text);
      await rename(next, this.path);
      this.#expires = body.expires;
    } catch {
      // A failed renewal is retried at the next tick; if they all fail the
      // lease expires, which is exactly what a lease is for.
    }
  }
}

function content(token: string, settings: LeaseSettings): { text: string; expires: number } {
  const body: LockContent = { pid: process.pid, host: hostname(), run: PROCESS_RUN, token, expires: settings.now() + settings.leaseMs };
  return { text: JSON.stringify(body), expires: body.expires };
}

/**
 * Creates the lock file with its content in one step: written aside, then
 * hard-linked into place (link fails with EEXIST if a lock exists). A
 * process killed half-way leaves at worst a stray temp file, never an empty
 * lock that others would have to wait a whole lease for. File systems
 * without hard links (FAT, some network shares) fall back to O_EXCL.
 */
async function createExclusive(path: string, body: string): Promise<boolean> {
  const aside = `${path}.${randomUUID()}.new`;
  try {
    // In the try: a write that fails (ENOSPC) may have made the file, and a full disk would gain one per attempt.
    await writeFile(aside, body, { flag: 'wx' });
    await link(aside, path);
    return true;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return false;
    if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EOPNOTSUPP' && code !== 'ENOSYS') throw error;
    return createWithOpen(path, body);
  } finally {
    await unlink(aside).catch(() => undefined);
  }
}

async function createWithOpen(path: string, body: string): Promise<boolean> {
  let handle;
  try {
    handle = await open(path, 'wx');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  }
  try {
    await handle.writeFile(body);
    await handle.close();
    return true;
  } catch (error) {
    await handle.close().catch(() => undefined);
    await unlink(path).catch(ignoreMissing);
    throw error;
  }
}

/** The raw lock file when it is stale, `undefined` when it is live, `null` when it vanished. */
async function readStale(path: string, settings: LeaseSettings): Promise<string | null | undefined> {
  let raw: string;
  try {
    raw = await readFile(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw error;
  }
  const current = parse(raw);
  if (current === undefined) {
    // Empty or half written (only the O_EXCL fallback makes the file before writing it): its owner is writing, or died
    // there. Give it a lease's time from when the file was made.
    const info = await stat(path).catch(() => undefined);
    if (info === undefined) return null;
    return info.mtimeMs + settings.leaseMs <= Date.now() ? raw : undefined;
  }
  if (current.expires <= settings.now()) return raw;
  if (current.host !== hostname()) return undefined;
  // Our pid: ours (another FileStorage or thread may hold it) unless an earlier process with this pid wrote it.
  if (current.pid === process.pid) return PROCESS_RUN !== undefined && current.run !== undefined && current.run !== PROCESS_RUN ? raw : undefined;
  return isAlive(current.pid) ? undefined : raw;
}

/** Moves a stale lock aside; if what moved was a fresh lock after all, puts it back. */
async function takeOver(path: string, stale: string): Promise<void> {
  const aside = `${path}.${randomUUID()}.stale`;
  try {
    await rename(path, aside);
  } catch (error) {
    ignoreMissing(error);
    return;
  }
  const moved = await readFile(aside, 'utf8').catch(() => '');
  if (moved !== stale) await link(aside, path).catch(() => undefined);
  await unlink(aside).catch(ignoreMissing);
}

function parse(raw: string): LockContent | undefined {
  try {
    const value = JSON.parse(raw) as Partial<LockContent> | null;
    if (typeof value?.token !== 'string' || typeof value.expires !== 'number' || typeof value.pid !== 'number') return undefined;
    return value as LockContent;
  } catch {
    return undefined;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: the process exists but belongs to another user.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function ignoreMissing(error: unknown): void {
  if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
}
