import { readFile } from 'node:fs/promises';
import { checkCors } from '../http/cors.ts';
import { WHEN_BUSY } from '../types.ts';
import { ROUTER_OPTION_KINDS, type AgentRouterOptions } from '../router/options.ts';
import { checkChoice, checkOption, checkOptions, nearest, type OptionKind } from '../options.ts';
import type { AllowedHosts } from './allowed-hosts.ts';

/**
 * Options of an {@link AgentServer}. Durations are seconds, as everywhere in
 * the public API. Everything an {@link AgentRouterOptions} takes passes
 * through, except `prefix` (the server mounts its router at `/agent`) and
 * `pool` (the server owns its pool).
 */
export interface AgentServerConfig extends Omit<AgentRouterOptions, 'prefix' | 'pool'> {
  /** Serve `GET /agents` (live agent ids, last activity, busy). @defaultValue false */
  enableListAgents?: boolean | undefined;
  /** Serve `GET /playground`, a page to try the agents from a browser (docs/guide/browser.md). @defaultValue false */
  playground?: boolean | undefined;
  /**
   * Host names (without port) the server answers, against DNS rebinding; an
   * entry starting with a dot allows every name under it (`.example.com`).
   * `localhost`, names under `.localhost` and IP addresses are always
   * allowed; `true` allows any. Not given, a server listening on a loopback
   * address (`127.0.0.1`, the default) answers only those (403
   * `host_not_allowed` otherwise), and one listening on other addresses
   * (or `listener` on a server of your own) answers any. A proxy on the same
   * machine passes its own choice of name: nginx the host of `proxy_pass`
   * (an upstream block's name, such as `backend`), or the public name with
   * `proxy_set_header Host $host`; list that name.
   */
  allowedHosts?: AllowedHosts | undefined;
  /** Seconds `close()` lets running turns and streams finish before aborting them. @defaultValue 10 */
  shutdownTimeout?: number | undefined;
  /**
   * Seconds `close()` first goes on serving as usual, new connections
   * included, while `GET /healthz` answers 503: the time a load balancer
   * needs to see it and stop sending (Kubernetes removes a terminating pod
   * from its Service some seconds after SIGTERM). @defaultValue 0
   */
  drainDelay?: number | undefined;
  /**
   * Seconds an idle keep-alive connection stays open. Above the 60 s idle
   * timeout of common load balancers (AWS ALB), so the balancer, not the
   * server, closes first and never sends on a socket the server just closed.
   * @defaultValue 65
   */
  keepAliveTimeout?: number | undefined;
  /** Seconds a client has to send the request headers; kept above `keepAliveTimeout`. @defaultValue keepAliveTimeout + 1 */
  headersTimeout?: number | undefined;
  /**
   * Seconds a client has to send the whole request (slow uploads); 0 for no
   * limit. It ends when the request is received, so it never cuts a long
   * response stream. @defaultValue max(120, headersTimeout)
   */
  requestTimeout?: number | undefined;
}

/** The server settings after defaults, all present. */
export interface ServerSettings {
  idleTimeout: number;
  maxAgents: number;
  enableListAgents: boolean;
  playground: boolean;
  shutdownTimeout: number;
  drainDelay: number;
  keepAliveTimeout: number;
  headersTimeout: number;
  requestTimeout: number;
}

/** What a JSON config file may hold: server options, plus where to listen and keep data. */
export interface FileConfig {
  server: AgentServerConfig;
  port?: number | undefined;
  host?: string | undefined;
  dataDir?: string | undefined;
  /** Where the CLI's demo keeps its agents: `memory`, `file:<dir>`, `postgres://...` or `redis://...` (checked by the CLI). */
  storage?: string | undefined;
}

/** The router's options but `prefix` and `pool`, which the server sets itself. */
const { prefix: _prefix, pool: _pool, ...SHARED_KINDS } = ROUTER_OPTION_KINDS;

/** Every option the server takes, and how it is checked (typed so a new option cannot be forgotten here). */
const OPTIONS: { readonly [K in keyof Required<AgentServerConfig>]: OptionKind } = {
  ...SHARED_KINDS,
  enableListAgents: 'boolean',
  playground: 'boolean',
  allowedHosts: 'hosts',
  shutdownTimeout: 'seconds',
  drainDelay: 'seconds',
  keepAliveTimeout: 'positiveSeconds',
  headersTimeout: 'positiveSeconds',
  requestTimeout: 'seconds',
};

/** The config file's snake_case keys and the option each sets. */
const FILE_KEYS: Record<string, string> = {
  idle_timeout: 'idleTimeout',
  max_agents: 'maxAgents',
  enable_list_agents: 'enableListAgents',
  playground: 'playground',
  allowed_hosts: 'allowedHosts',
  shutdown_timeout: 'shutdownTimeout',
  drain_delay: 'drainDelay',
  keep_alive_timeout: 'keepAliveTimeout',
  headers_timeout: 'headersTimeout',
  request_timeout: 'requestTimeout',
  body_limit: 'bodyLimit',
  strict_content_type: 'strictContentType',
  max_id_length: 'maxIdLength',
  ping_interval: 'pingInterval',
  turn_timeout: 'turnTimeout',
  max_streams: 'maxStreams',
  openapi: 'openapi',
  metrics: 'metrics',
  on_disconnect: 'onDisconnect',
  when_busy: 'whenBusy',
  max_queue: 'maxQueue',
  replay_ttl: 'replayTTL',
  replay_limit: 'replayLimit',
};
const FILE_EXTRA: Record<string, OptionKind> = { port: 'port', host: 'string', data_dir: 'string', storage: 'string', cors_origins: 'origins' };

/** Every key a config file may hold, in the order `--help` lists them. */
export const CONFIG_FILE_KEYS: readonly string[] = [...Object.keys(FILE_KEYS), ...Object.keys(FILE_EXTRA)];

/**
 * Checks an AgentServer config and fills in the defaults. A wrong type or an
 * unknown key is a TypeError naming the key (`name` maps an option to the
 * name the user wrote, e.g. its snake_case spelling in a config file).
 */
export function resolveServerConfig(config: AgentServerConfig, where = 'AgentServer', name: (key: string) => string = (key) => key): ServerSettings {
  if (typeof config !== 'object' || config === null || Array.isArray(config)) {
    throw new TypeError(`${where}: config must be an object, e.g. { idleTimeout: 300, maxAgents: 10000 }`);
  }
  checkOptions(config, OPTIONS, where, name, suggest);
  // Here too, so a mistake in it is named as the AgentServer's option, not the router it makes.
  if (config.cors !== undefined) checkCors(config.cors, where);
  checkChoice(config.whenBusy, WHEN_BUSY, `${where}: ${name('whenBusy')}`);
  const keepAliveTimeout = config.keepAliveTimeout ?? 65;
  const headersTimeout = config.headersTimeout ?? keepAliveTimeout + 1;
  const requestTimeout = config.requestTimeout ?? Math.max(120, headersTimeout);
  if (headersTimeout <= keepAliveTimeout) {
    // Node then times a reused connection's next request out as it arrives (the old ALB 502 bug).
    throw new TypeError(`${where}: ${name('headersTimeout')} (${headersTimeout}) must be above ${name('keepAliveTimeout')} (${keepAliveTimeout})`);
  }
  if (requestTimeout !== 0 && requestTimeout < headersTimeout) {
    throw new TypeError(`${where}: ${name('requestTimeout')} (${requestTimeout}) must be 0 or at least ${name('headersTimeout')} (${headersTimeout})`);
  }
  return {
    idleTimeout: config.idleTimeout ?? 300,
    maxAgents: config.maxAgents ?? 10_000,
    enableListAgents: config.enableListAgents ?? false,
    playground: config.playground ?? false,
    shutdownTimeout: config.shutdownTimeout ?? 10,
    drainDelay: config.drainDelay ?? 0,
    keepAliveTimeout,
    headersTimeout,
    requestTimeout,
  };
}

/**
 * Reads a JSON config file written with snake_case keys, e.g.
 * `{"idle_timeout": 300, "max_agents": 1000, "enable_list_agents": true, "port": 8080}`.
 * Throws a TypeError naming the file and the bad key.
 */
export async function readConfigFile(file: string): Promise<FileConfig> {
  let bytes: Buffer;
  try {
    bytes = await readFile(file);
  } catch (error) {
    throw new TypeError(`cannot read config file ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, { cause: error });
  }
  // Windows editors save a byte order mark, which JSON.parse refuses as an invisible "Unexpected token"; Node
  // skips it in package.json. A UTF-16 file (Windows PowerShell's `>` writes one) cannot be read as UTF-8 at all.
  if ((bytes[0] === 0xff && bytes[1] === 0xfe) || (bytes[0] === 0xfe && bytes[1] === 0xff)) {
    throw new TypeError(`config file ${file} is saved as UTF-16 (as Windows PowerShell's > writes); save it as UTF-8`);
  }
  const text = bytes.toString('utf8').replace(/^\uFEFF/, '');
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (error) {
    throw new TypeError(`config file ${file} is not valid JSON: ${withLine((error as Error).message, text)}`, { cause: error });
  }
  return parseFileConfig(data, `config file ${file}`);
}

/** Node 20's JSON.parse says only "at position 312": the line and column, as Node 22 adds them, for whoever edits the file. */
function withLine(message: string, text: string): string {
  const at = /at position (\d+)(?!.*line)/.exec(message);
  if (at === null) return message;
  const before = text.slice(0, Number(at[1]));
  return `${message} (line ${before.split('\n').length} column ${before.length - before.lastIndexOf('\n')})`;
}

/** Maps a parsed config file (snake_case) to options; see {@link readConfigFile}. */
export function parseFileConfig(data: unknown, where: string): FileConfig {
  if (typeof data !== 'object' || data === null || Array.isArray(data)) {
    throw new TypeError(`${where}: must hold a JSON object, e.g. {"idle_timeout": 300, "max_agents": 1000}`);
  }
  const server: Record<string, unknown> = {};
  const result: FileConfig = { server };
  for (const [key, value] of Object.entries(data)) {
    // Own keys only: "constructor" or "__proto__" would otherwise find Object.prototype's and be taken for an option.
    const option = Object.hasOwn(FILE_KEYS, key) ? FILE_KEYS[key] : undefined;
    const extra = Object.hasOwn(FILE_EXTRA, key) ? FILE_EXTRA[key] : undefined;
    if (option !== undefined) server[option] = value;
    else if (extra !== undefined) {
      checkOption(value, extra, `${where}: ${key}`);
      if (key === 'port') result.port = value as number;
      else if (key === 'host') result.host = value as string;
      else if (key === 'data_dir') result.dataDir = value as string;
      else if (key === 'storage') result.storage = value as string;
      else server['cors'] = { origins: value };
    } else {
      // nearest() ignores case and `_`, so the constructor's idleTimeout points at idle_timeout too.
      const hint = nearest(key, CONFIG_FILE_KEYS).replace('; known options:', '; known keys:');
      throw new TypeError(`${where}: unknown key ${JSON.stringify(key)}${hint}`);
    }
  }
  const snake = Object.fromEntries(Object.entries(FILE_KEYS).map(([file, option]) => [option, file]));
  resolveServerConfig(result.server, where, (option) => snake[option] ?? option);
  return result;
}

/** `idle_timeout` passed to the constructor: point at `idleTimeout`. */
function suggest(key: string): string {
  const camel = Object.hasOwn(FILE_KEYS, key) ? FILE_KEYS[key] : undefined;
  if (camel !== undefined) return `; did you mean ${camel}? (snake_case names are for config files)`;
  if (key === 'port' || key === 'host') return `; where to listen is serve(port, host)'s, e.g. server.serve(8080, '0.0.0.0')`;
  return nearest(key, Object.keys(OPTIONS));
}
