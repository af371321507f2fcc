import { setImmediate as turn } from 'node:timers/promises';
import v8 from 'node:v8';
import vm from 'node:vm';

// The test runner does not pass --expose-gc. Setting the flag at run time
// and fetching `gc` from a fresh context works on Node 20 (checked on 20.20):
// the new context is created after the flag is set, so it gets the function.
v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

/**
 * Heap in use after pending callbacks ran and a full collection: a number
 * that moves only when something is really retained. Several rounds, because
 * finalizers and weak callbacks free more on the next pass.
 */
export async function settledHeap(): Promise<number> {
  for (let i = 0; i < 4; i++) {
    await turn();
    gc();
  }
  return process.memoryUsage().heapUsed;
}

export const MiB = 1024 * 1024;

export function mib(bytes: number): string {
  return `${(bytes / MiB).toFixed(1)} MiB`;
}
