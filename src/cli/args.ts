import { parseArgs } from 'node:util';
import { checkOption } from '../options.ts';
import type { AgentServerConfig } from '../server/config.ts';
import { parseStorageSpec, type StorageSpec } from './storage-spec.ts';
import { UsageError } from './usage-error.ts';

export interface CliArgs {
  command: 'serve' | 'help' | 'version';
  /** The module to serve, as given (resolved from the working directory later). */
  module: string | undefined;
  port: number | undefined;
  host: string | undefined;
  config: string | undefined;
  dataDir: string | undefined;
  /** `--storage`: where the demo keeps its agents (see storage-spec.ts). */
  storage: StorageSpec | undefined;
  /** `--idle_timeout`, `--max_agents`, `--enable_list_agents` (ai-query's Python server options), `--allowed-hosts` (or with dashes / underscores): over the config file's. */
  server: Pick<AgentServerConfig, 'idleTimeout' | 'maxAgents' | 'enableListAgents' | 'allowedHosts'>;
}

/**
 * Parses `agent-router [serve] [module] [--port n] [--host h] [--config file]
 * [--data-dir dir | --storage spec] [--idle_timeout s] [--max_agents n]
 * [--enable_list_agents] [--help] [--version]`. `serve` is the default
 * command, so `agent-router app.js` serves app.js. The server options take
 * ai-query's snake_case names, and dashes as the other flags do.
 */
export function parseCliArgs(argv: readonly string[]): CliArgs {
  // Asking for help shows it, whatever else is on the line (a typo there is often why help is wanted).
  if (argv.includes('--help') || argv.includes('-h')) {
    return { command: 'help', module: undefined, port: undefined, host: undefined, config: undefined, dataDir: undefined, storage: undefined, server: {} };
  }
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      allowPositionals: true,
      strict: true,
      options: {
        port: { type: 'string', short: 'p' },
        host: { type: 'string' },
        config: { type: 'string', short: 'c' },
        'data-dir': { type: 'string' },
        storage: { type: 'string' },
        idle_timeout: { type: 'string' },
        'idle-timeout': { type: 'string' },
        max_agents: { type: 'string' },
        'max-agents': { type: 'string' },
        enable_list_agents: { type: 'boolean' },
        'enable-list-agents': { type: 'boolean' },
        allowed_hosts: { type: 'string' },
        'allowed-hosts': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
        version: { type: 'boolean', short: 'v' },
      },
    });
  } catch (error) {
    throw new UsageError(describeParseError(error as Error & { code?: string }));
  }
  const { values, positionals } = parsed;
  const words = [...positionals];
  let command: CliArgs['command'] = 'serve';
  if (words[0] === 'serve') words.shift();
  else if (words[0] === 'help') {
    words.shift();
    command = 'help';
  }
  if (values.help === true) command = 'help';
  else if (values.version === true) command = 'version';
  if (words.length > 1) throw new UsageError(`serve takes one module, got ${words.length}: ${words.join(' ')}`);
  const module = words[0];
  const dataDir = nonEmpty(values['data-dir'], '--data-dir');
  const storage = values.storage === undefined ? undefined : parseStorageSpec(values.storage, '--storage');
  if (storage !== undefined && dataDir !== undefined) {
    throw new UsageError('--storage and --data-dir both say where the demo keeps its agents; give one (--data-dir <dir> is --storage file:<dir>)');
  }
  if (storage !== undefined && module !== undefined && command === 'serve') {
    // Refused, not ignored: the user would believe their agents are in Postgres while they are where the module put them.
    throw new UsageError(`--storage applies to the demo only; ${module} chooses its agents' storage in its code, e.g. new Agent(id, { model, storage: postgresStorage(pool) })`);
  }
  if (dataDir !== undefined && module !== undefined && command === 'serve') {
    // Refused for the same reason: agents of a module without a storage of their own live in memory, not there.
    throw new UsageError(`--data-dir applies to the demo only; ${module} chooses its agents' storage in its code, e.g. new Agent(id, { model, storage: new FileStorage('${dataDir}') })`);
  }
  return {
    command,
    module,
    port: values.port === undefined ? undefined : parsePort(values.port, '--port'),
    host: nonEmpty(values.host, '--host'),
    config: nonEmpty(values.config, '--config'),
    dataDir,
    storage,
    server: command === 'serve' ? serverFlags(values) : {},
  };
}

/** The server options given as flags; only those given, so the config file's stay where no flag is. */
function serverFlags(values: Record<string, string | boolean | undefined>): CliArgs['server'] {
  for (const name of ['idle_timeout', 'max_agents', 'enable_list_agents', 'allowed_hosts']) {
    if (values[name] !== undefined && values[name.replaceAll('_', '-')] !== undefined) {
      throw new UsageError(`--${name} and --${name.replaceAll('_', '-')} are the same option; give it once`);
    }
  }
  const server: CliArgs['server'] = {};
  const idle = values['idle_timeout'] ?? values['idle-timeout'];
  if (typeof idle === 'string') {
    const seconds = /^\d+(\.\d+)?$/.test(idle) ? Number(idle) : Number.NaN;
    if (!(seconds <= 2_147_483)) throw new UsageError(`--idle_timeout must be a number of seconds from 0 to 2147483 (0: never drop), got ${JSON.stringify(idle.slice(0, 20))}`);
    server.idleTimeout = seconds;
  }
  const max = values['max_agents'] ?? values['max-agents'];
  if (typeof max === 'string') {
    const count = /^\d{1,15}$/.test(max) ? Number(max) : 0;
    if (count < 1) throw new UsageError(`--max_agents must be a whole number >= 1, got ${JSON.stringify(max.slice(0, 20))}`);
    server.maxAgents = count;
  }
  if (values['enable_list_agents'] === true || values['enable-list-agents'] === true) server.enableListAgents = true;
  const hosts = values['allowed_hosts'] ?? values['allowed-hosts'];
  if (typeof hosts === 'string') {
    const names = hosts.split(',').map((name) => name.trim()).filter((name) => name !== '');
    try {
      checkOption(names, 'hosts', '--allowed-hosts');
    } catch {
      throw new UsageError('--allowed-hosts takes host names without port, comma-separated, such as agents.example.com,.example.com (a leading dot: that name and every name under it; no * wildcards)');
    }
    server.allowedHosts = names;
  }
  return server;
}

/** A port number from a flag or the PORT variable; a UsageError naming `source` otherwise. */
export function parsePort(text: string, source: string): number {
  const port = /^\d{1,5}$/.test(text) ? Number(text) : Number.NaN;
  if (!(port >= 0 && port <= 65535)) throw new UsageError(`${source} must be a port number from 0 to 65535, got ${JSON.stringify(text.slice(0, 20))}`);
  return port;
}

function nonEmpty(value: string | undefined, flag: string): string | undefined {
  if (value === '') throw new UsageError(`${flag} needs a value`);
  return value;
}

/** node:util's messages are long and suggest `--`; say what is wrong in a few words instead. */
function describeParseError(error: Error & { code?: string }): string {
  // The quoted part is the option as typed ('--prot') or as declared ('-p, --port <value>'): prefer the long name.
  const quoted = /'(-[^']*)'/.exec(error.message)?.[1];
  const option = quoted === undefined ? undefined : (/--[\w-]+/.exec(quoted)?.[0] ?? quoted.split(/[ ,]/)[0]);
  if (error.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && option !== undefined) return `unknown option ${option}`;
  if (error.code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && option !== undefined) {
    if (/argument missing/.test(error.message)) return `${option} needs a value`;
    // `-p -1`: node:util will not take a value that starts with a dash unless it is joined to the option.
    if (/ambiguous/.test(error.message)) {
      const long = /'(--[\w-]+)=/.exec(error.message)?.[1] ?? option;
      return `${option} needs a value; one that starts with "-" is written ${long}=<value>`;
    }
    return `${option} takes no value`;
  }
  return error.message;
}
