import { stat } from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Agent } from '../agent/agent.ts';
import { AgentRegistry } from '../registry/registry.ts';
import { AgentServer } from '../server/server.ts';

/** Something the CLI can serve: ours, or a server from another copy of the library (it only needs these). */
export interface Servable {
  serve(port?: number, host?: string): Promise<unknown>;
  close(): Promise<void>;
  readonly url: string | undefined;
}

export type Loaded = { kind: 'server'; server: Servable } | { kind: 'registry'; target: AgentRegistry } | { kind: 'agent'; target: Agent<any> };

/** A module that cannot be served: printed as one line, exit code 1. */
export class LoadError extends Error {
  override name = 'LoadError';
}

const WANTED = 'an AgentRegistry, an Agent or an AgentServer';

/**
 * Imports the user's module (a path resolved from `cwd`) and checks its
 * default export. Every failure is a LoadError that says what to change.
 */
export async function loadModule(specifier: string, cwd: string): Promise<Loaded> {
  const file = path.resolve(cwd, specifier);
  const info = await stat(file).catch(() => undefined);
  if (info === undefined) throw new LoadError(`cannot find module ${specifier} (looked for ${file})`);
  if (info.isDirectory()) throw new LoadError(`${specifier} is a directory; give the module file, e.g. ${path.join(specifier, 'index.js')}`);
  let exports: Record<string, unknown>;
  try {
    exports = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === 'ERR_UNKNOWN_FILE_EXTENSION' && /\.[mc]?ts$/.test(file)) {
      throw new LoadError(`cannot load TypeScript module ${specifier} with plain node; run the CLI under tsx (node --import tsx ./node_modules/.bin/agent-router serve ${specifier}) or compile it to .js`, { cause: error });
    }
    throw new LoadError(`loading ${specifier} failed: ${firstLine(error)}`, { cause: error });
  }
  if (!('default' in exports)) {
    throw new LoadError(`${specifier} has no default export; end it with \`export default registry\` (${WANTED})`);
  }
  let value = exports['default'];
  // `module.exports = main()` in CommonJS, which has no top-level await: what the promise gives is the export.
  if (value instanceof Promise) {
    try {
      value = await value;
    } catch (error) {
      throw new LoadError(`${specifier}'s default export, a promise, failed: ${firstLine(error)}`, { cause: error });
    }
  }
  return classify(value, specifier);
}

function classify(value: unknown, specifier: string): Loaded {
  if (value instanceof AgentServer) return { kind: 'server', server: value };
  if (value instanceof AgentRegistry) return { kind: 'registry', target: value };
  if (value instanceof Agent) return { kind: 'agent', target: value };
  const object = value as Record<string, unknown> | null;
  if (typeof object === 'object' && object !== null) {
    // A server from another installation of agent-router still serves and closes the same way.
    if (typeof object['serve'] === 'function' && typeof object['close'] === 'function' && 'registry' in object) {
      return { kind: 'server', server: object as unknown as Servable };
    }
    const looksLike = Array.isArray(object['_routes']) ? 'an AgentRegistry' : typeof object['stream'] === 'function' && typeof object['id'] === 'string' ? 'an Agent' : undefined;
    if (looksLike !== undefined) {
      throw new LoadError(
        `${specifier} default-exports ${looksLike} from another copy of agent-router than the CLI's; ` +
          'import agent-router from the same installation as the CLI, or default-export an AgentServer made with your copy. ' +
          '(tsx loads a .ts file of a CommonJS project, one without "type": "module" in package.json, with a copy of its own: ' +
          'name the file .mts, or set "type": "module")',
      );
    }
  }
  if (typeof value === 'function' && value.prototype instanceof Agent) {
    throw new LoadError(
      `${specifier} default-exports the class ${value.name}; export a registry instead: ` +
        `const registry = new AgentRegistry(); registry.register('.*', ${value.name}); export default registry`,
    );
  }
  throw new LoadError(`${specifier} default-exports ${describe(value)}, not ${WANTED}`);
}

function describe(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  if (typeof value === 'function') return `a function${value.name ? ` (${value.name})` : ''}`;
  if (typeof value === 'object') return `an object (${(value as object).constructor?.name ?? 'no prototype'})`;
  return `a ${typeof value}`;
}

function firstLine(error: unknown): string {
  const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return message.split('\n', 1)[0] as string;
}
