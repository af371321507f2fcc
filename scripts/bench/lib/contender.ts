/**
 * Starts a contender as a child process pinned to CPU 0 (`taskset`),
 * with the file-descriptor limit raised to the hard limit, and talks to it
 * over IPC (port announcement, heap and CPU readings, eviction).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import type { Command, HeapReport, Reply } from './protocol.ts';

export interface Runtime {
  /** Where the contender files are: the compiled copy, or the sources for tsx. */
  contendersDir: string;
  /** `.js` for the compiled copy, `.ts` for tsx. */
  extension: '.js' | '.ts';
  /** Node flags before the file (e.g. `--import tsx`). */
  nodeFlags: string[];
  /** `taskset` is there: children are pinned to CPU 0. */
  pin: boolean;
  cwd: string;
}

export class Contender {
  readonly name: string;
  readonly port: number;
  readonly prefix: string;
  readonly #child: ChildProcess;
  readonly #pending = new Map<number, (result: unknown) => void>();
  #next = 0;
  #stderr = '';

  private constructor(name: string, child: ChildProcess, ready: Extract<Reply, { type: 'ready' }>) {
    this.name = name;
    this.#child = child;
    this.port = ready.port;
    this.prefix = ready.prefix;
    child.on('message', (message: Reply) => {
      if (message.type !== 'reply') return;
      this.#pending.get(message.id)?.(message.result);
      this.#pending.delete(message.id);
    });
  }

  /** `http://127.0.0.1:port` plus the contender's mount prefix (`/agent` for AgentServer). */
  get base(): string {
    return `http://127.0.0.1:${this.port}${this.prefix}`;
  }

  get pid(): number {
    return this.#child.pid as number;
  }

  /** What the contender wrote to stderr so far (warnings, crashes). */
  get stderr(): string {
    return this.#stderr;
  }

  /**
   * Starts `contenders/<file>` and resolves once it listens. `extraNodeFlags`
   * go before the file (e.g. `--cpu-prof`), `args` after it.
   */
  static async start(runtime: Runtime, file: string, options: { args?: string[]; extraNodeFlags?: string[]; timeoutMs?: number } = {}): Promise<Contender> {
    const script = path.join(runtime.contendersDir, file + runtime.extension);
    const node = [process.execPath, '--expose-gc', ...runtime.nodeFlags, ...(options.extraNodeFlags ?? []), script, ...(options.args ?? [])];
    // A child inherits this process's affinity, CPU 1 once pinned: without widening it again, start-up would
    // not use both CPUs as intended below. (os.cpus() lists every CPU; availableParallelism() only ours.)
    if (runtime.pin) node.unshift('taskset', '-c', `0-${os.cpus().length - 1}`);
    // A shell raises the soft descriptor limit to the hard one (10,000 sockets need more than the usual 1024).
    const child = spawn('/bin/sh', ['-c', 'ulimit -n "$(ulimit -Hn)" 2>/dev/null; exec "$@"', 'sh', ...node], {
      cwd: runtime.cwd,
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      env: { ...process.env, NODE_ENV: 'production' },
    });
    let stderr = '';
    child.stderr?.setEncoding('utf8').on('data', (text: string) => {
      stderr += text;
    });
    child.stdout?.resume();
    const timeoutMs = options.timeoutMs ?? 30_000;
    const ready = await new Promise<Extract<Reply, { type: 'ready' }>>((resolve, reject) => {
      const timer = setTimeout(() => fail(new Error(`${file}: not listening after ${timeoutMs} ms`)), timeoutMs);
      const fail = (error: Error): void => {
        clearTimeout(timer);
        child.kill('SIGKILL');
        reject(new Error(`${error.message}${stderr === '' ? '' : `\n${stderr.trim().split('\n').slice(-8).join('\n')}`}`));
      };
      child.once('error', fail);
      child.once('exit', (code, signal) => fail(new Error(`${file}: exited (${signal ?? code}) before listening`)));
      child.on('message', (message: Reply) => {
        if (message.type !== 'ready') return;
        clearTimeout(timer);
        child.removeAllListeners('exit');
        resolve(message);
      });
    });
    if (runtime.pin) {
      // Pinned once listening: start-up (module loading, JIT of top-level code) may use both CPUs, which
      // matters when a round starts nine contenders at once; -a pins every thread, and later threads inherit it.
      const pinned = spawnSync('taskset', ['-a', '-cp', '0', String(child.pid)], { encoding: 'utf8' });
      if (pinned.status !== 0) {
        child.kill('SIGKILL');
        throw new Error(`${file}: taskset -a -cp 0 ${child.pid} failed: ${pinned.stderr.trim()}`);
      }
    }
    const contender = new Contender(file, child, ready);
    child.stderr?.removeAllListeners('data').on('data', (text: string) => {
      contender.#stderr += text;
    });
    contender.#stderr = stderr;
    return contender;
  }

  #ask<T>(cmd: Command['cmd'], path?: string): Promise<T> {
    const id = this.#next++;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${this.name}: no answer to ${cmd}`)), 60_000);
      this.#pending.set(id, (result) => {
        clearTimeout(timer);
        resolve(result as T);
      });
      this.#child.send({ id, cmd, path } satisfies Command);
    });
  }

  /** Heap after two full GCs. */
  heap(): Promise<HeapReport> {
    return this.#ask('heap');
  }

  /** CPU time used so far, in microseconds. */
  async cpu(): Promise<number> {
    const usage = await this.#ask<{ user: number; system: number }>('cpu');
    return usage.user + usage.system;
  }

  /** Writes a heap snapshot (after a full GC) to `file`; resolves with its path. */
  snapshot(file: string): Promise<string> {
    return this.#ask('snapshot', file);
  }

  /** Live agents (per-id records for the bare and native contenders). */
  count(): Promise<number> {
    return this.#ask('count');
  }

  /** Drops every live agent; resolves with how many remain. */
  evict(): Promise<number> {
    return this.#ask('evict');
  }

  /** Ends the process; resolves once it exited (SIGTERM, then SIGKILL after `graceMs`). */
  stop(graceMs = 3000): Promise<void> {
    const child = this.#child;
    if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      child.once('exit', () => {
        clearTimeout(timer);
        resolve();
      });
      child.kill('SIGTERM');
    });
  }
}
