/**
 * Per-CPU busy time from /proc/stat (Linux): whether CPU 0 (the contender)
 * and CPU 1 (the load generator) were saturated during a measurement, by
 * anyone. A process's own CPU time leaves out the kernel's loopback network
 * work (softirq) and other processes; this does not.
 */
import { readFileSync } from 'node:fs';

/** Jiffies per CPU: [busy, total]. Empty where /proc/stat is unreadable. */
export function cpuTimes(): Array<[number, number]> {
  let text: string;
  try {
    text = readFileSync('/proc/stat', 'utf8');
  } catch {
    return [];
  }
  const times: Array<[number, number]> = [];
  for (const line of text.split('\n')) {
    const match = /^cpu(\d+) (.*)$/.exec(line);
    if (match === null) continue;
    // user nice system idle iowait irq softirq steal ...
    const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] = (match[2] as string).trim().split(/\s+/).map(Number);
    times[Number(match[1])] = [user + nice + system + irq + softirq + steal, user + nice + system + idle + iowait + irq + softirq + steal];
  }
  return times;
}

/** Busy share of CPU `cpu` between two readings; NaN when unknown. */
export function busyBetween(before: Array<[number, number]>, after: Array<[number, number]>, cpu: number): number {
  const a = before[cpu];
  const b = after[cpu];
  if (a === undefined || b === undefined || b[1] === a[1]) return Number.NaN;
  return (b[0] - a[0]) / (b[1] - a[1]);
}
