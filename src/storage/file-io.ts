/**
 * FileStorage's disk operations on one journal: read its view cheaply (from
 * a cached view when the file is unchanged, reading only appended bytes when
 * it grew), read it whole, append a line, replace it with a snapshot. The
 * caller (file.ts) holds the id's locks; these functions only do I/O.
 */
import { randomUUID } from 'node:crypto';
import type { BigIntStats } from 'node:fs';
import { constants } from 'node:fs';
import { open, rename, stat, unlink } from 'node:fs/promises';
import path from 'node:path';
import { EMPTY_VIEW, scanJournal } from './file-journal.ts';
import type { JournalView, ParsedJournal } from './file-journal.ts';

/** A journal's view plus the identity of the file it was read from, to tell an unchanged file cheaply. */
export interface CachedView extends JournalView {
  ino: bigint;
  birth: bigint;
  size: bigint;
  mtime: bigint;
  /**
   * The view this one was brought up from by reading appended lines (another
   * process's commits): its version, and where its lines ended. loadSince
   * reads from there rather than the whole file.
   */
  since?: { version: number; validBytes: number } | undefined;
}

/** The view of a journal that does not exist. */
export const NO_FILE: CachedView = { ...EMPTY_VIEW, ino: 0n, birth: 0n, size: 0n, mtime: 0n };

type Handle = Awaited<ReturnType<typeof open>>;

/** The journal's view; `cached` (from an earlier read of this file) saves reading what was read before. */
export async function readView(file: string, agentId: string, cached: CachedView | undefined): Promise<CachedView> {
  if (cached !== undefined) {
    const info = await stat(file, { bigint: true }).catch(() => undefined);
    // Only appends change a journal in place (compaction makes a new file), so the same file at the same size holds the
    // same content; unless a torn tail was cut and rewritten to the same length, hence the validBytes test.
    if (info !== undefined && sameFile(cached, info) && cached.size === info.size && cached.mtime === info.mtimeNs
      && BigInt(cached.validBytes) === cached.size) return cached;
  }
  const handle = await openIfExists(file);
  if (handle === undefined) return NO_FILE;
  try {
    const info = await handle.stat({ bigint: true });
    if (cached !== undefined && sameFile(cached, info) && info.size >= BigInt(cached.validBytes)) {
      const tail = await readRange(handle, cached.validBytes, Number(info.size) - cached.validBytes);
      const view = scanJournal(tail, { agentId, file, from: cached });
      if (view !== undefined) {
        const since = view.version > cached.version ? { version: cached.version, validBytes: cached.validBytes } : cached.since;
        return { ...withIdentity(view, info), since };
      }
    }
    return withIdentity(scanWhole(file, agentId, await readRange(handle, 0, Number(info.size))), info);
  } finally {
    await handle.close();
  }
}

/**
 * The bytes from `offset` to the end of `view`'s valid lines, if the file is
 * still the one `view` was read from (not replaced by a compaction); else
 * undefined, and the caller reads it whole.
 */
export function readSince(file: string, view: CachedView, offset: number): Promise<Buffer | undefined> {
  return withOpen(file, async (handle) => {
    const info = await handle.stat({ bigint: true });
    if (!sameFile(view, info) || info.size < BigInt(view.validBytes)) return undefined;
    return readRange(handle, offset, view.validBytes - offset);
  });
}

/** `length` bytes of `file` from `offset` (fewer at its end); undefined when there is no file. */
export function readAt(file: string, offset: number, length: number): Promise<Buffer | undefined> {
  return withOpen(file, (handle) => readRange(handle, offset, length));
}

/** The whole journal (state and history) and its view; `undefined` when there is no file. */
export function readWhole(file: string, agentId: string): Promise<{ journal: ParsedJournal; view: CachedView } | undefined> {
  return withOpen(file, async (handle) => {
    const info = await handle.stat({ bigint: true });
    const journal = scanWhole(file, agentId, await readRange(handle, 0, Number(info.size)));
    return { journal, view: withIdentity(journal, info) };
  });
}

/**
 * Journals hold conversations: readable by their owner only (directories
 * 0700, files 0600, as created). A journal that is a symlink is refused
 * (ELOOP) rather than followed, so a link planted in the directory cannot
 * make a torn-tail repair truncate, or an append write to, another file.
 */
const PRIVATE = 0o600;
const NOFOLLOW = constants.O_NOFOLLOW ?? 0;
// Read as well as write: a failed line is read back before it is taken back (appendLine).
const APPEND = constants.O_RDWR | constants.O_APPEND | constants.O_CREAT | NOFOLLOW;
const READ = constants.O_RDONLY | NOFOLLOW;

/**
 * Appends one line after cutting off a torn tail (a crashed writer's half
 * line), flushing it when asked; resolves the file's identity afterwards.
 * `view` must have been read under the id's lock, so no writer added since.
 * A line that failed is cut off again, and `tookBack` called when some of it had been written:
 * only when what follows `view` is the start of that line, never another writer's.
 */
export async function appendLine(file: string, view: CachedView, line: string, fsync: boolean, tookBack?: () => void): Promise<BigIntStats> {
  const handle = await open(file, APPEND, PRIVATE);
  try {
    if (view.size > BigInt(view.validBytes)) await handle.truncate(view.validBytes);
    const ours = Buffer.from(line);
    // Written by hand, not writeFile: a failure then knows how much of its line reached the file.
    let written = 0;
    try {
      while (written < ours.length) written += (await handle.write(ours, written, ours.length - written)).bytesWritten;
      if (fsync) await handle.datasync();
      return await handle.stat({ bigint: true });
    } catch (error) {
      // Reported failed, so its line must not stay for the next load. Cut only when what follows `view` is exactly as long
      // as what we wrote: a writer that took over a lapsed lease may have appended a line of its own. Best effort.
      const size = await handle.stat().then((info) => info.size, () => Infinity);
      if (written > 0 && size === view.validBytes + written) {
        const back = await readRange(handle, view.validBytes, written).catch(() => undefined);
        if (back?.length === written && back.equals(ours.subarray(0, written))) {
          await handle.truncate(view.validBytes).then(tookBack, () => undefined);
        }
      }
      throw error;
    }
  } finally {
    await handle.close();
  }
}

/** Replaces the journal by `content` atomically: temp file, flush, rename, flush the directory. */
export async function replaceFile(file: string, content: string): Promise<BigIntStats> {
  const temp = `${file}.${randomUUID()}.tmp`;
  const handle = await open(temp, 'wx', PRIVATE);
  let info: BigIntStats;
  try {
    await handle.writeFile(content);
    await handle.datasync();
    info = await handle.stat({ bigint: true });
  } finally {
    await handle.close();
  }
  try {
    await rename(temp, file);
  } catch (error) {
    await unlink(temp).catch(() => undefined);
    throw error;
  }
  await syncDir(path.dirname(file));
  return info;
}

export function withIdentity(view: JournalView, info: BigIntStats): CachedView {
  return {
    version: view.version,
    validBytes: view.validBytes,
    stateBytes: view.stateBytes,
    staleBytes: view.staleBytes,
    ino: info.ino,
    birth: info.birthtimeNs,
    size: info.size,
    mtime: info.mtimeNs,
  };
}

/** Makes a created, renamed or removed directory entry durable; a no-op where directories cannot be opened (Windows). */
export async function syncDir(dir: string): Promise<void> {
  let handle;
  try {
    handle = await open(dir, 'r');
    await handle.sync();
  } catch {
    // EISDIR/EPERM on Windows: its file system orders metadata itself.
  } finally {
    await handle?.close();
  }
}

function scanWhole(file: string, agentId: string, bytes: Buffer): ParsedJournal {
  // A whole-file scan throws on a mid-file snapshot rather than yield undefined.
  return scanJournal(bytes, { agentId, file, collect: true }) as ParsedJournal;
}

function sameFile(cached: CachedView, info: BigIntStats): boolean {
  return cached.ino === info.ino && cached.birth === info.birthtimeNs;
}

/** Runs `read` on the file opened for reading, closed afterwards; undefined when there is no file. */
async function withOpen<T>(file: string, read: (handle: Handle) => Promise<T>): Promise<T | undefined> {
  const handle = await openIfExists(file);
  if (handle === undefined) return undefined;
  try {
    return await read(handle);
  } finally {
    await handle.close();
  }
}

async function openIfExists(file: string): Promise<Handle | undefined> {
  try {
    return await open(file, READ);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

async function readRange(handle: Handle, position: number, length: number): Promise<Buffer> {
  const buffer = Buffer.alloc(Math.max(0, length));
  let filled = 0;
  while (filled < buffer.length) {
    const { bytesRead } = await handle.read(buffer, filled, buffer.length - filled, position + filled);
    if (bytesRead === 0) break;
    filled += bytesRead;
  }
  return filled === buffer.length ? buffer : buffer.subarray(0, filled);
}
