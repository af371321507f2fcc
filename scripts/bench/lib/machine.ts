/**
 * The machine the numbers come from, and the conditions of a fair run:
 * a quiet machine (1-minute load average), the load generator pinned to
 * CPU 1 and the contenders to CPU 0, enough file descriptors.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import os from 'node:os';

export interface Machine {
  cores: number;
  model: string;
  node: string;
  /** 1-minute load average before the run. */
  loadBefore: number;
  /** Over it, the machine counts as busy: 0.5 x cores. */
  loadLimit: number;
  /** The load generator and the contenders each have a CPU of their own. */
  pinned: boolean;
  /** Soft limit on open files of this process (the load generator). */
  fileLimit: number;
  warnings: string[];
}

function cpuModel(): string {
  try {
    const text = execFileSync('lscpu', { encoding: 'utf8' });
    const line = /^Model name:\s*(.+)$/m.exec(text);
    if (line?.[1] !== undefined) return line[1].trim();
  } catch {
    // no lscpu: fall back to what Node reads from /proc/cpuinfo
  }
  return os.cpus()[0]?.model ?? 'unknown CPU';
}

function fileLimit(): number {
  // A shell started from here inherits this process's limits.
  const result = spawnSync('/bin/sh', ['-c', 'ulimit -n'], { encoding: 'utf8' });
  const value = Number(result.stdout.trim());
  return Number.isFinite(value) ? value : 1024;
}

/** Pins this process to CPU 1; false (with a warning) when it cannot. */
function pinSelf(cores: number, warnings: string[]): boolean {
  if (cores < 2) {
    warnings.push(`only ${cores} CPU: the load generator and the contenders share it (numbers are lower and noisier)`);
    return false;
  }
  if (spawnSync('/bin/sh', ['-c', 'command -v taskset'], { encoding: 'utf8' }).status !== 0) {
    warnings.push('taskset not found (util-linux): contenders and the load generator run unpinned, so they may share a CPU');
    return false;
  }
  // -a: every thread (libuv pool, V8's GC helpers), not only the main one.
  const result = spawnSync('taskset', ['-a', '-cp', '1', String(process.pid)], { encoding: 'utf8' });
  if (result.status !== 0) {
    warnings.push(`taskset -a -cp 1 failed (${result.stderr.trim()}): running unpinned`);
    return false;
  }
  return true;
}

export function inspectMachine(): Machine {
  const cores = os.availableParallelism();
  const warnings: string[] = [];
  const pinned = pinSelf(cores, warnings);
  return {
    cores,
    model: cpuModel(),
    node: process.version,
    loadBefore: os.loadavg()[0] as number,
    loadLimit: 0.5 * cores,
    pinned,
    fileLimit: fileLimit(),
    warnings,
  };
}

export function currentLoad(): number {
  return os.loadavg()[0] as number;
}
