import { access, constants, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { echoModel } from '../models/echo.ts';
import { modelFromEnv } from '../models/from-env.ts';
import type { Model } from '../models/model.ts';
import { FileStorage } from '../storage/file.ts';
import type { Storage } from '../storage/storage.ts';
import { LoadError } from './load.ts';

export interface EmbeddedDefaults {
  storage: Storage;
  /** How the banner describes the storage. */
  storageLabel: string;
  chatModel: Model;
  /** How the banner describes the chat model. */
  chatModelLabel: string;
}

/**
 * The demo's embedded defaults: no service, no key. Agents persist as files
 * under `dataDir` (FileStorage, so a restart keeps them); the `chat-*` agents
 * use a real model when OPENAI_API_KEY / OPENAI_BASE_URL or
 * ANTHROPIC_API_KEY is set, the offline echo model otherwise.
 */
export async function embeddedDefaults(dataDir: string, env: NodeJS.ProcessEnv, cwd: string): Promise<EmbeddedDefaults> {
  // Checked now, so a bad --data-dir is one line at start rather than a 500 on the first turn.
  try {
    await mkdir(dataDir, { recursive: true });
    await access(dataDir, constants.W_OK);
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    throw new LoadError(`cannot use ${dataDir} as the data directory (${reason}); pass a writable one with --data-dir`, { cause: error });
  }
  const chatModel = modelFromEnv(env, echoModel);
  const shown = path.relative(cwd, dataDir);
  return {
    storage: new FileStorage(dataDir),
    storageLabel: `files in ${shown === '' ? '.' : shown.startsWith('..') ? dataDir : `./${shown}`} (FileStorage; kept across restarts)`,
    chatModel,
    chatModelLabel: chatModel.name === 'echo' ? 'the offline echo model (set OPENAI_API_KEY or ANTHROPIC_API_KEY for a real one)' : `the model ${chatModel.name}`,
  };
}
