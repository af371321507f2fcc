/**
 * The contender side of the bench protocol: announce the port once
 * listening, answer the parent's measurement commands over IPC, and exit
 * when the parent goes away (so no contender outlives a crashed run).
 */
import type { Server } from 'node:http';
import { writeHeapSnapshot } from 'node:v8';
import type { AddressInfo } from 'node:net';
import type { Command, HeapReport, Reply } from '../lib/protocol.ts';

export interface ContenderHooks {
  /** Live agents (or per-id records of a bare server). */
  count?: (() => number) | undefined;
  /** Drops every live agent, as idle eviction would. */
  evict?: (() => void) | undefined;
}

const gc = (globalThis as { gc?: () => void }).gc;

function heap(): HeapReport {
  // Two passes: the first can leave objects that only a second one finds unreachable (weak maps, finalizers).
  gc?.();
  gc?.();
  const usage = process.memoryUsage();
  return { heapUsed: usage.heapUsed, external: usage.external, rss: usage.rss };
}

/** Tells the parent where this contender listens, then serves its commands. */
export function announce(name: string, port: number, prefix: string, hooks: ContenderHooks = {}): void {
  if (process.send === undefined) {
    console.log(`${name} listening on http://127.0.0.1:${port}${prefix} (no bench parent: IPC commands off)`);
    return;
  }
  process.on('message', (message: Command) => {
    let result: Extract<Reply, { type: 'reply' }>['result'];
    switch (message.cmd) {
      case 'heap':
        result = heap();
        break;
      case 'cpu':
        result = process.cpuUsage();
        break;
      case 'snapshot':
        gc?.();
        result = writeHeapSnapshot(message.path);
        break;
      case 'evict':
        hooks.evict?.();
        result = hooks.count?.() ?? 0;
        break;
      default:
        result = hooks.count?.() ?? 0;
    }
    process.send?.({ type: 'reply', id: message.id, result } satisfies Reply);
  });
  process.on('disconnect', () => process.exit(0));
  // An orderly exit, so `--cpu-prof` writes its profile.
  process.on('SIGTERM', () => process.exit(0));
  process.send({ type: 'ready', port, prefix, name } satisfies Reply);
}

/** Listens on 127.0.0.1, port 0; resolves with the port. */
export function listen(server: Server): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port));
  });
}
