import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { LoadError } from './load.ts';

/**
 * Imports a driver package as the user's project would: resolved from `cwd`
 * (not from where the CLI is installed), through a specifier held in a
 * variable, so the built library has no import of any driver. Undefined
 * when the package is not installed there.
 */
export async function importDriver(name: string, cwd: string): Promise<Record<string, unknown> | undefined> {
  let file: string;
  try {
    file = createRequire(path.join(cwd, 'noop.js')).resolve(name);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND') return undefined;
    throw new LoadError(`cannot resolve the ${name} package from ${cwd}: ${(error as Error).message.split('\n', 1)[0]}`, { cause: error });
  }
  try {
    return (await import(pathToFileURL(file).href)) as Record<string, unknown>;
  } catch (error) {
    throw new LoadError(`loading the ${name} package (${file}) failed: ${(error as Error).message.split('\n', 1)[0]}`, { cause: error });
  }
}

/** The export `name` of a driver: a named export, or a member of the CommonJS default export. */
export function exportOf(driver: Record<string, unknown>, name: string): unknown {
  if (driver[name] !== undefined) return driver[name];
  const fallback = driver['default'] as Record<string, unknown> | undefined;
  return typeof fallback === 'object' || typeof fallback === 'function' ? fallback?.[name] : undefined;
}
