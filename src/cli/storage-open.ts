import { access, constants, mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { FileStorage } from '../storage/file.ts';
import { MemoryStorage } from '../storage/memory.ts';
import { LoadError } from './load.ts';
import type { DemoStorage } from './storage-spec.ts';
import { openPostgres, openRedis, type Log, type OpenedStorage } from './storage-remote.ts';

/**
 * Opens the demo's storage. Postgres and Redis are reached through the
 * user's own driver, loaded from `cwd` at run time, and checked before the
 * server listens, so a wrong URL is one line at start rather than a 500 on
 * the first turn. Every failure is a LoadError (exit code 1).
 */
export async function openStorage(choice: DemoStorage, cwd: string, log: Log): Promise<OpenedStorage> {
  switch (choice.kind) {
    case 'memory': {
      const storage = new MemoryStorage();
      return { storage, label: 'in memory (MemoryStorage; lost on exit)', close: async () => undefined };
    }
    case 'file':
      return openFile(choice.dir, cwd);
    case 'postgres':
      return openPostgres(choice, cwd, log);
    case 'redis':
      return openRedis(choice, cwd, log);
  }
}

/** What a data directory the CLI made tells git: none of it is source (as a Python venv's does). */
const NOT_IN_GIT = '# Made by agent-router: the agents\' conversations and state, not source.\n*\n';

/** What mkdir's and access's codes mean for a data directory. */
const DIR_ERRORS: Record<string, string> = {
  EEXIST: 'it is a file, not a directory',
  ENOTDIR: 'a part of its path is a file, not a directory',
  EACCES: 'permission denied',
  EPERM: 'permission denied',
  EROFS: 'the file system is read-only',
  // Node's recursive mkdir reports a read-only file system under the directory as ENOENT too.
  ENOENT: 'it cannot be made there (a read-only file system, or a symbolic link to nothing on its path?)',
};

async function openFile(dir: string, cwd: string): Promise<OpenedStorage> {
  try {
    const made = await mkdir(dir, { recursive: true, mode: 0o700 });
    await access(dir, constants.W_OK);
    // `./.data` is made in the user's project: conversations must not end up in a commit with it.
    if (made !== undefined) await writeFile(path.join(dir, '.gitignore'), NOT_IN_GIT, { flag: 'wx' }).catch(() => undefined);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    // The code alone ("EEXIST") does not say that a file is where the directory should be.
    const why = (code !== undefined && DIR_ERRORS[code]) || (error as Error).message;
    throw new LoadError(`cannot use ${dir} as the data directory: ${why}${code === undefined ? '' : ` (${code})`}; pass a writable directory with --data-dir`, { cause: error });
  }
  const storage = new FileStorage(dir);
  const shown = path.relative(cwd, dir);
  const where = shown === '' ? '.' : shown.startsWith('..') ? dir : `./${shown}`;
  return { storage, label: `files in ${where} (FileStorage; kept across restarts)`, close: () => storage.close() };
}
