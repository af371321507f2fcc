import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';

const root = process.cwd();
// Under tsx the CLI runs from source; compiled into .build (the coverage run), from there.
const fromSource = import.meta.url.endsWith('.ts');
export const cliArgs = fromSource
  ? ['--import', import.meta.resolve('tsx'), path.join(root, 'src/cli/main.ts')]
  : [path.join(root, '.build/src/cli/main.js')];

export interface Cli {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Runs `agent-router <args>` as a child process, `given` added to its environment; the test's `after` kills it if it still runs. */
export function runCli(t: { after: (fn: () => unknown) => void }, args: string[], cwd = root, given: NodeJS.ProcessEnv = {}): Cli {
  const env = { ...process.env };
  // Offline and predictable: no real model, no inherited port, no drivers from elsewhere.
  for (const name of ['PORT', 'AGENT_ROUTER_DEBUG', 'OPENAI_API_KEY', 'OPENAI_BASE_URL', 'ANTHROPIC_API_KEY', 'NODE_PATH']) delete env[name];
  return spawnNode(t, [...cliArgs, ...args], cwd, { ...env, ...given });
}

/** Runs `node <args>`, collecting its output; the test's `after` kills it if it still runs and waits for its exit. */
export function spawnNode(t: { after: (fn: () => unknown) => void }, args: string[], cwd: string, env: NodeJS.ProcessEnv): Cli {
  const child = spawn(process.execPath, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout?.setEncoding('utf8').on('data', (text: string) => (out += text));
  child.stderr?.setEncoding('utf8').on('data', (text: string) => (err += text));
  // 'close', not 'exit': 'exit' can come before the last of the child's output has been read.
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('close', (code, signal) => resolve({ code, signal }));
  });
  t.after(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    return exited;
  });
  return { child, stdout: () => out, stderr: () => err, exited };
}

/** Resolves with the URL the CLI prints once it listens; rejects if it exits first. */
export function listening(cli: Cli): Promise<string> {
  return new Promise((resolve, reject) => {
    const check = (): void => {
      const match = /listening on (http:\/\/\S+)/.exec(cli.stdout());
      if (match !== null) {
        cli.child.stdout?.off('data', check);
        resolve(match[1] as string);
      }
    };
    cli.child.stdout?.on('data', check);
    check();
    void cli.exited.then(({ code, signal }) => reject(new Error(`child exited (${code ?? signal}) before listening: ${cli.stderr()}`)));
  });
}
