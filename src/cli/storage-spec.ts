/**
 * `--storage <spec>` (and `"storage"` in a config file): where the demo keeps
 * its agents. Parsing only; storage-open.ts connects.
 *
 *   memory                               MemoryStorage (lost on exit)
 *   file:<dir>                           FileStorage in <dir> (same as --data-dir <dir>)
 *   postgres://user@host:5432/db         postgresStorage on the user's `pg`
 *     ?schema=<name>&table_prefix=<p>    (our parameters; the rest go to pg)
 *   redis://host:6379/0  (rediss://)     redisStorage on the user's `redis` or `ioredis`
 *     ?prefix=<key prefix>
 */
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { postgresStorageDDL } from '../storage/postgres.ts';
import { UsageError } from './usage-error.ts';

/** A server reached over the network: the URL to connect with, and how to name it without its credentials. */
interface Remote {
  /** The connection URL for the driver, with our own query parameters removed; may hold a password. */
  url: string;
  /** `scheme://host:port/path`, without credentials or query: safe to print. */
  shown: string;
  /** `host:port`, for error messages. */
  address: string;
  /** The scheme as typed, e.g. `postgresql`. */
  scheme: string;
  /** Who asked for it, for messages: `--storage`, or `config file x.json: storage`. */
  source: string;
}

export type StorageSpec =
  | { kind: 'memory' }
  | { kind: 'file'; dir: string }
  | ({ kind: 'postgres'; schema: string | undefined; tablePrefix: string | undefined } & Remote)
  | ({ kind: 'redis'; prefix: string | undefined } & Remote);

export const STORAGE_FORMS = 'memory, file:<dir>, postgres://…, postgresql://…, redis://… or rediss://…';

/**
 * Parses a storage spec; a UsageError naming `source` when it is not one.
 * Relative `file:` directories stay relative (resolved later, from the
 * working directory).
 */
export function parseStorageSpec(text: string, source: string): StorageSpec {
  if (text === '') throw new UsageError(`${source} needs a value: ${STORAGE_FORMS}`);
  if (text === 'memory') return { kind: 'memory' };
  if (text.startsWith('file:')) return { kind: 'file', dir: fileDir(text, source) };
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(text)?.[1]?.toLowerCase();
  if (scheme === 'postgres' || scheme === 'postgresql') {
    const { remote, params } = remoteOf(text, scheme, source, ['schema', 'table_prefix'], 5432);
    const schema = params.get('schema');
    const tablePrefix = params.get('table_prefix');
    try {
      postgresStorageDDL({ schema, tablePrefix }); // the library's own check of both names
    } catch (error) {
      const reason = (error as Error).message.replace(/^postgresStorage: /, '').replace(/^tablePrefix/, 'table_prefix');
      throw new UsageError(`${source}: ?${reason}`);
    }
    return { kind: 'postgres', schema, tablePrefix, ...remote };
  }
  if (scheme === 'redis' || scheme === 'rediss') {
    const { remote, params } = remoteOf(text, scheme, source, ['prefix'], 6379);
    return { kind: 'redis', prefix: params.get('prefix'), ...remote };
  }
  throw new UsageError(`${source} must be ${STORAGE_FORMS}; got ${JSON.stringify(redact(text).slice(0, 80))}`);
}

/** A URL without its user name and password, for messages. Strips up to the last `@`, so a raw `/` in a password cannot leak the rest. */
export function redact(text: string): string {
  return text.replace(/^([a-z][a-z0-9+.-]*:\/\/).*@/i, '$1');
}

function fileDir(text: string, source: string): string {
  let dir = text.slice('file:'.length);
  if (dir.startsWith('//')) {
    try {
      dir = fileURLToPath(text); // file:///abs/dir
    } catch (error) {
      throw new UsageError(`${source}: ${(error as Error).message}; write file:<dir>, e.g. file:./.data or file:///var/lib/agents`);
    }
  }
  if (dir === '') throw new UsageError(`${source} file: needs a directory, e.g. file:./.data`);
  return dir;
}

function remoteOf(text: string, scheme: string, source: string, own: readonly string[], defaultPort: number): { remote: Remote; params: Map<string, string> } {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new UsageError(`${source} is not a valid URL: ${JSON.stringify(redact(text).slice(0, 80))}; e.g. ${scheme}://localhost:${defaultPort}/`);
  }
  const params = new Map<string, string>();
  for (const name of own) {
    const value = url.searchParams.get(name);
    if (value === '') throw new UsageError(`${source}: ?${name}= needs a value`);
    if (value !== null) params.set(name, value);
  }
  // Untouched unless we took a parameter out: the driver sees the URL as the user wrote it.
  let connect = text;
  if (params.size > 0) {
    for (const name of own) url.searchParams.delete(name);
    connect = url.href;
  }
  const address = `${url.hostname === '' ? 'localhost' : url.hostname}:${url.port === '' ? defaultPort : url.port}`;
  const shown = `${scheme}://${address}${url.pathname === '/' ? '' : url.pathname}`;
  return { remote: { url: connect, shown, address, scheme, source }, params };
}

/**
 * `~` and `~/dir` as a shell would read them: no shell reads a config file's
 * `data_dir`, nor `file:~/dir` or `--data-dir=~/dir`, and a directory named
 * `~` in the project is what the user meant least.
 */
function homeExpanded(dir: string): string {
  return dir === '~' || dir.startsWith('~/') ? path.join(os.homedir(), dir.slice(1)) : dir;
}

/** Where the demo's agents live once flags, config file and defaults are weighed. */
export type DemoStorage = Exclude<StorageSpec, { kind: 'file' }> | { kind: 'file'; dir: string };

/**
 * Chooses the demo's storage: the `--storage` or `--data-dir` flag, else the
 * config file's `storage` or `data_dir`, else files in `./.data`. Relative
 * directories resolve from `cwd`. A config file setting both, or a bad
 * `storage` there, is a TypeError naming the file (like every config error).
 */
export function demoStorage(
  flags: { storage: StorageSpec | undefined; dataDir: string | undefined },
  file: { storage?: string | undefined; dataDir?: string | undefined },
  where: string,
  cwd: string,
): DemoStorage {
  const inDir = (dir: string): DemoStorage => ({ kind: 'file', dir: path.resolve(cwd, homeExpanded(dir)) });
  if (flags.storage !== undefined) return flags.storage.kind === 'file' ? inDir(flags.storage.dir) : flags.storage;
  if (flags.dataDir !== undefined) return inDir(flags.dataDir);
  if (file.storage === undefined) return inDir(file.dataDir ?? '.data');
  if (file.dataDir !== undefined) throw new TypeError(`${where}: set storage or data_dir, not both ("data_dir": ${JSON.stringify(file.dataDir)} is "storage": ${JSON.stringify(`file:${file.dataDir}`)})`);
  let spec: StorageSpec;
  try {
    spec = parseStorageSpec(file.storage, `${where}: storage`);
  } catch (error) {
    throw new TypeError((error as Error).message, { cause: error });
  }
  return spec.kind === 'file' ? inDir(spec.dir) : spec;
}
