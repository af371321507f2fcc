/**
 * Starts storage-server-child.ts as a child process (from source under tsx,
 * compiled from .build under the coverage run) and talks to it over HTTP.
 */
import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { listening, spawnNode } from './cli.ts';
import type { ChildConfig } from './storage-server-child.ts';

const root = process.cwd();
// Next to this file: the .ts source under tsx, the compiled .js under the coverage run.
const fromSource = import.meta.url.endsWith('.ts');
const childFile = fileURLToPath(new URL(`./storage-server-child.${fromSource ? 'ts' : 'js'}`, import.meta.url));
const childArgs = fromSource ? ['--import', import.meta.resolve('tsx'), childFile] : [childFile];

export interface ServerChild {
  url: string;
  child: ChildProcess;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stderr: () => string;
}

/** Spawns one server and resolves once it listens; the test's `after` kills it if still running. */
export async function startServerChild(t: { after: (fn: () => unknown) => void }, config: ChildConfig): Promise<ServerChild> {
  const env = { ...process.env };
  delete env['NODE_V8_COVERAGE']; // a SIGKILLed child writes no coverage; none of them need to
  const server = spawnNode(t, [...childArgs, JSON.stringify(config)], root, env);
  const url = await listening(server);
  return { url, child: server.child, exited: server.exited, stderr: server.stderr };
}

/** POSTs JSON and returns the status and the parsed body. */
export async function post(url: string, body: unknown, signal?: AbortSignal): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    ...(signal === undefined ? {} : { signal }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** A small seeded PRNG (mulberry32), so a failing run can be replayed from its printed seed. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let r = Math.imul(a ^ (a >>> 15), 1 | a);
    r = (r + Math.imul(r ^ (r >>> 7), 61 | r)) ^ r;
    return ((r ^ (r >>> 14)) >>> 0) / 4294967296;
  };
}
