import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { readConfigFile, type AgentServerConfig, type FileConfig } from '../server/config.ts';
import { AgentServer } from '../server/server.ts';
import { parseCliArgs, parsePort, type CliArgs } from './args.ts';
import { embeddedDefaults } from './defaults.ts';
import { demoBanner, demoRegistry } from './demo.ts';
import { HELP } from './help.ts';
import { LoadError, loadModule, type Servable } from './load.ts';
import { whenParentGone } from './parent-watch.ts';
import { demoStorage } from './storage-spec.ts';
import { UsageError } from './usage-error.ts';

const NAME = 'agent-router';
/** The flag each server option from args.ts comes from, for the note when a module's own AgentServer ignores it. */
const SERVER_FLAGS: { readonly [K in keyof CliArgs['server']]-?: string } = {
  idleTimeout: '--idle_timeout',
  maxAgents: '--max_agents',
  enableListAgents: '--enable_list_agents',
  allowedHosts: '--allowed-hosts',
};

/**
 * Runs the CLI. Resolves with an exit code when it is done (help, or an
 * error, printed as one line); while serving it resolves with undefined and
 * the process lives on until SIGINT or SIGTERM, which close the server
 * gracefully and exit 0.
 */
export async function main(argv: readonly string[], env: NodeJS.ProcessEnv = process.env, cwd: string = process.cwd()): Promise<number | undefined> {
  ignoreGoneReaders();
  try {
    const args = parseCliArgs(argv);
    if (args.command === 'help') {
      process.stdout.write(HELP);
      return 0;
    }
    if (args.command === 'version') {
      process.stdout.write(`${NAME} ${await packageVersion()}\n`);
      return 0;
    }
    await serve(args, env, cwd);
    return undefined;
  } catch (error) {
    return report(error, env);
  }
}

async function serve(args: CliArgs, env: NodeJS.ProcessEnv, cwd: string): Promise<void> {
  const file: FileConfig = args.config === undefined ? { server: {} } : await readConfigFile(path.resolve(cwd, args.config));
  const port = args.port ?? file.port ?? (env['PORT'] ? parsePort(env['PORT'], 'the PORT variable') : 8080);
  const host = args.host ?? file.host ?? '127.0.0.1';
  const config: AgentServerConfig = { ...file.server, ...args.server };

  let server: Servable;
  let banner = '';
  let cleanup: () => Promise<void> = async () => {};
  if (args.module === undefined) {
    const where = demoStorage(args, file, `config file ${args.config}`, cwd);
    const defaults = await embeddedDefaults(where, env, cwd, (line) => process.stderr.write(`${NAME}: ${line}\n`));
    cleanup = defaults.closeStorage;
    try {
      // The demo is for trying agents out: its playground page is on unless the config file turns it off.
      server = new AgentServer(demoRegistry({ storage: defaults.storage, chatModel: defaults.chatModel }), { playground: true, ...config });
    } catch (error) {
      await cleanup();
      throw error;
    }
    await listen(server, port, host).catch(async (error: unknown) => {
      await cleanup(); // a storage holding files open would keep the process alive after the error
      throw error;
    });
    banner = demoBanner(server.url as string, defaults.storageLabel, defaults.chatModelLabel, (server as AgentServer).config.playground);
  } else {
    const loaded = await loadModule(args.module, cwd);
    // The flag is refused with a module (args.ts); a shared config file's storage key is only pointed out.
    if (file.storage !== undefined) warn(`${args.module} chooses its agents' storage; "storage" in ${args.config} applies to the demo only`);
    if (file.dataDir !== undefined) warn(`${args.module} chooses its agents' storage; "data_dir" in ${args.config} applies to the demo only`);
    if (loaded.kind === 'server') {
      server = loaded.server;
      if (Object.keys(file.server).length > 0) warn(`${args.module} exports its own AgentServer; only port and host from --config apply`);
      // Name the flags given, not all four: a note about flags the user never typed reads as a mistake of theirs.
      const ignored = (Object.keys(args.server) as Array<keyof CliArgs['server']>).map((option) => SERVER_FLAGS[option]);
      if (ignored.length > 0) warn(`${args.module} exports its own AgentServer; ${ignored.join(', ')} ${ignored.length === 1 ? 'does' : 'do'} not apply to it`);
    } else {
      server = new AgentServer(loaded.target, config);
    }
    await listen(server, port, host);
    const url = server.url as string;
    banner = `  POST ${url}/agent/{agent_id}/chat   (?stream=true for SSE)\n  GET  ${url}/healthz\n`;
  }
  // Platforms that set $PORT (Heroku, Render, Cloud Run, Fly.io) route to it from outside the container,
  // which a loopback address never answers: their health check fails with nothing in the log to say why.
  if (args.port === undefined && file.port === undefined && env['PORT'] && args.host === undefined && file.host === undefined) {
    warn(`the port comes from $PORT, but the host is ${host}, reachable from this machine only; where a platform routes $PORT to the server from outside, add --host 0.0.0.0`);
  }
  // Before the line below: a script that reads it may signal at once, and must get the graceful shutdown.
  onSignals(server, cleanup, env);
  // The first line is what scripts (and the e2e tests) read to find the port.
  process.stdout.write(`${NAME}: listening on ${server.url}\n${banner}`);
}

async function listen(server: Servable, port: number, host: string): Promise<void> {
  try {
    await server.serve(port, host);
  } catch (error) {
    const code = (error as { code?: string }).code;
    // AgentServer's own message names the address and the fix; keep it without its class prefix.
    const message = (error as Error).message.replace(/^AgentServer\.serve: /, '');
    // A module's AgentServer that started itself: the CLI is what serves it (with --port and --host).
    const hint = message.startsWith('already serving') ? '; a module given to agent-router serve exports its server without calling serve() itself' : '';
    throw new LoadError(code === 'EADDRINUSE' ? `${message} (--port)` : `${message}${hint}`, { cause: error });
  }
}

/**
 * `cleanup` runs after the server closed: the demo's storage releases its
 * files, or its pool or client ends. Under npm, the npm process going away
 * counts as SIGTERM (see parent-watch.ts).
 */
function onSignals(server: Servable, cleanup: () => Promise<void>, env: NodeJS.ProcessEnv): void {
  let stopping = false;
  const stop = (why: string): void => {
    if (stopping) {
      // A second Ctrl-C: the user does not want to wait for the drain.
      process.stderr.write(`${NAME}: ${why} again; exiting now\n`);
      process.exit(130);
    }
    stopping = true;
    process.stdout.write(`${NAME}: ${why}; finishing running requests, then exiting\n`);
    server.close().then(cleanup).then(
      () => process.exit(0),
      (error: unknown) => {
        process.stderr.write(`${NAME}: error while shutting down: ${(error as Error).message}\n`);
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT received'));
  process.on('SIGTERM', () => stop('SIGTERM received'));
  // Not a second signal: Ctrl-C or a process group's SIGTERM also ends npm, and the drain must go on.
  whenParentGone(env, () => stopping || stop('the npm process that started this server is gone'));
}

let ignoringGoneReaders = false;

/**
 * A reader that went away (`agent-router serve 2>&1 | head -1`) must not turn a later line into a crash
 * that skips the graceful shutdown; the lines are only for people and scripts reading them. Here, not in
 * the bin's main.ts: `npm start` (scripts/start.mjs) calls main() without it. Both streams: a storage
 * backend's reconnects go to stderr through process.stderr.write, which, unlike console.error, throws.
 */
function ignoreGoneReaders(): void {
  if (ignoringGoneReaders) return;
  ignoringGoneReaders = true;
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EPIPE') throw error;
    });
  }
}

/** One line on stderr, no stack (set AGENT_ROUTER_DEBUG=1 for it); 2 for usage mistakes, 1 otherwise. */
function report(error: unknown, env: NodeJS.ProcessEnv): number {
  const usage = error instanceof UsageError;
  const known = usage || error instanceof LoadError || error instanceof TypeError;
  const message = error instanceof Error ? error.message : String(error);
  process.stderr.write(`${NAME}: ${known ? message : `unexpected error: ${message}`}\n`);
  if (usage) process.stderr.write(`Run '${NAME} --help' for usage.\n`);
  if (env['AGENT_ROUTER_DEBUG']) process.stderr.write(`${(error as Error)?.stack ?? ''}\n${inspectCause(error)}`);
  return usage ? 2 : 1;
}

function inspectCause(error: unknown): string {
  const cause = (error as { cause?: unknown } | undefined)?.cause;
  return cause instanceof Error && cause.stack !== undefined ? `Caused by: ${cause.stack}\n` : '';
}

function warn(message: string): void {
  process.stderr.write(`${NAME}: note: ${message}\n`);
}

/** The version in the package's own package.json, the nearest one above this file named agent-router. */
async function packageVersion(): Promise<string> {
  for (let dir = path.dirname(fileURLToPath(import.meta.url)); ; dir = path.dirname(dir)) {
    try {
      const pkg = JSON.parse(await readFile(path.join(dir, 'package.json'), 'utf8')) as { name?: unknown; version?: unknown };
      if (pkg.name === NAME && typeof pkg.version === 'string') return pkg.version;
    } catch {
      // None here (or unreadable): look further up.
    }
    if (path.dirname(dir) === dir) return 'unknown';
  }
}
