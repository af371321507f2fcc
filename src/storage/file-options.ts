import { checkKnownOptions } from '../options.ts';
import type { LeaseSettings } from './file-lock.ts';
import { leaseMilliseconds } from './ids.ts';

export interface FileStorageOptions {
  /**
   * Flush each commit to the disk (`fdatasync`) before `commit` resolves, and
   * the directory after a journal is created, renamed or removed. With
   * `false`, a commit is in the operating system's cache when it resolves:
   * it survives the process crashing or being killed, but a power cut or a
   * kernel crash may lose the last few seconds of turns. Compaction always
   * flushes, whatever this says.
   * @defaultValue true
   */
  fsync?: boolean | undefined;
  /**
   * How long a process's lock on an agent id lasts unless renewed (the
   * holder renews it every third of that). A process that dies mid-turn
   * blocks the id at most this long; on the same host a dead holder's pid is
   * noticed and its lock taken at once.
   * @defaultValue 30
   */
  leaseSeconds?: number | undefined;
  /**
   * Compaction rewrites a journal into one snapshot line once the states that
   * later commits superseded add up to this many bytes and to at least half
   * the file. Each compaction is paid for by as many bytes of appends, so a
   * turn's average cost stays independent of the history's length.
   * @defaultValue 1048576 (1 MiB)
   */
  compactAfterBytes?: number | undefined;
  /** Keep held locks alive (default true). `false` acts like a holder that died: for tests. @internal */
  renewLease?: boolean | undefined;
  /** The clock for lock expiry, in milliseconds since the epoch: for tests. @defaultValue Date.now @internal */
  now?: (() => number) | undefined;
}

const FILE_OPTIONS: { readonly [K in keyof Required<FileStorageOptions>]: true } = { fsync: true, leaseSeconds: true, compactAfterBytes: true, renewLease: true, now: true };

/** What a FileStorage runs with, from its options; misuse throws a TypeError that names the fix. */
export function fileSettings(options: FileStorageOptions): { fsync: boolean; lease: LeaseSettings; compactAfterBytes: number } {
  checkKnownOptions(options, FILE_OPTIONS, 'FileStorage');
  const lease = {
    leaseMs: leaseMilliseconds(options.leaseSeconds, 30, 'FileStorage'),
    now: options.now ?? Date.now,
    renew: options.renewLease ?? true,
  };
  const compact = options.compactAfterBytes ?? 1024 * 1024;
  if (!Number.isFinite(compact) || compact < 0) throw new TypeError('FileStorage: compactAfterBytes must be a number of bytes >= 0');
  return { fsync: options.fsync ?? true, lease, compactAfterBytes: compact };
}
