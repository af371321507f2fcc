/**
 * Starts storage-server-child.ts as a child process (from source under tsx,
 * compiled from .build under the coverage run) and talks to it over HTTP.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
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
  const child = spawn(process.execPath, [...childArgs, JSON.stringify(config)], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout?.setEncoding('utf8').on('data', (text: string) => (out += text));
  child.stderr?.setEncoding('utf8').on('data', (text: string) => (err += text));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('exit', (code, signal) => resolve({ code, signal }));
  });
  t.after(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    return exited;
  });
  const url = await new Promise<string>((resolve, reject) => {
    const check = (): void => {
      const match = /listening on (http:\/\/\S+)/.exec(out);
      if (match !== null) {
        child.stdout?.off('data', check);
        resolve(match[1] as string);
      }
    };
    child.stdout?.on('data', check);
    void exited.then(({ code, signal }) => reject(new Error(`server child exited (${code ?? signal}) before listening: ${err}`)));
  });
  return { url, child, exited, stderr: () => err };
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
