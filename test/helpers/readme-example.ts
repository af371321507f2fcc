/**
 * Runs a README example as a user's project would: `server.mjs` in a fresh
 * folder whose node_modules holds this checkout as `agent-router` (dist/ is
 * what gets published) and the drivers it names, resolving once `port`
 * accepts connections.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TestContext } from 'node:test';

const root = process.cwd();

export interface RunningExample {
  /** The scratch project's folder, the example's working directory. */
  project: string;
  /** The exit code, -1 if a signal ended it, null while it runs. */
  exited: () => number | null;
  stderr: () => string;
}

/**
 * `drivers` are linked from this checkout's node_modules under their own name; `aliases` maps the name the
 * example imports to the one installed here (`{ express: 'express5' }`).
 */
export async function runExample(t: TestContext, code: string, port: number, options: { drivers?: string[]; aliases?: Record<string, string>; env?: NodeJS.ProcessEnv } = {}): Promise<RunningExample> {
  const project = mkdtempSync(path.join(tmpdir(), 'agent-router-readme-'));
  t.after(() => rmSync(project, { recursive: true, force: true }));
  mkdirSync(path.join(project, 'node_modules'));
  symlinkSync(root, path.join(project, 'node_modules', 'agent-router'), 'dir');
  const links: Array<[string, string]> = [...(options.drivers ?? []).map((driver): [string, string] => [driver, driver]), ...Object.entries(options.aliases ?? {})];
  for (const [name, installed] of links) {
    mkdirSync(path.dirname(path.join(project, 'node_modules', name)), { recursive: true });
    symlinkSync(path.join(root, 'node_modules', installed), path.join(project, 'node_modules', name), 'dir');
  }
  writeFileSync(path.join(project, 'server.mjs'), code);
  const child = spawn(process.execPath, ['server.mjs'], { cwd: project, env: { ...process.env, ...options.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  t.after(() => {
    child.kill('SIGTERM');
    return exited;
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  for (let i = 0; i < 200; i++) {
    const up = await new Promise<boolean>((resolve) => {
      const socket = net.connect(port, '127.0.0.1', () => resolve(socket.end() !== undefined)).on('error', () => resolve(false));
    });
    if (up) break;
    assert.equal(child.exitCode, null, `server.mjs exited: ${stderr}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return { project, exited: () => child.exitCode ?? (child.signalCode === null ? null : -1), stderr: () => stderr };
}

/** A port nothing listens on now, for an example that takes its port as written. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}
