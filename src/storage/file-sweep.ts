/**
 * Removes the temp files a killed process leaves in a FileStorage directory.
 * Each lives for milliseconds when all goes well (written, then renamed or
 * linked into place, then removed), but a SIGKILL in between leaves it for
 * good: a lock's `.new`, `.renew` or `.stale`, and a compaction's `.tmp`,
 * which is a whole copy of a conversation and must not outlive `delete`.
 */
import { readdir, stat, unlink } from 'node:fs/promises';
import path from 'node:path';

/** `<base>.jsonl.<uuid>.tmp` (compaction), `<base>.lock.<uuid>.new|renew|stale` (file-lock.ts). */
const LEFTOVER = /\.(?:jsonl\.[0-9a-f-]{36}\.tmp|lock\.[0-9a-f-]{36}\.(?:new|renew|stale))$/;
const SNAPSHOT = /\.jsonl\.[0-9a-f-]{36}\.tmp$/;

/** Older than this, no live process is still about to rename or link it (a lock file is rewritten every third of its lease). */
export const LEFTOVER_AGE_MS = 60_000;

/**
 * Removes leftovers older than LEFTOVER_AGE_MS; with `base`, only that id's,
 * and its compaction snapshots whatever their age (the id is being deleted
 * under its lock). Best effort: a file that vanished or cannot be removed is
 * left to the next sweep.
 */
export async function sweepLeftovers(dir: string, base?: string): Promise<number> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch {
    return 0;
  }
  let removed = 0;
  for (const name of names) {
    if (!LEFTOVER.test(name) || (base !== undefined && !name.startsWith(`${base}.`))) continue;
    const file = path.join(dir, name);
    if (base === undefined || !SNAPSHOT.test(name)) {
      const info = await stat(file).catch(() => undefined);
      if (info === undefined || Date.now() - info.mtimeMs < LEFTOVER_AGE_MS) continue;
    }
    if (await unlink(file).then(() => true, () => false)) removed++;
  }
  return removed;
}
