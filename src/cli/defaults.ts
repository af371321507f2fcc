import { echoModel } from '../models/echo.ts';
import { modelFromEnv } from '../models/from-env.ts';
import type { Model } from '../models/model.ts';
import type { Storage } from '../storage/storage.ts';
import { openStorage } from './storage-open.ts';
import type { Log } from './storage-remote.ts';
import type { DemoStorage } from './storage-spec.ts';

export interface EmbeddedDefaults {
  storage: Storage;
  /** How the banner describes the storage. */
  storageLabel: string;
  /** Closes the storage and whatever the CLI opened for it (a pg pool, a Redis client). */
  closeStorage: () => Promise<void>;
  chatModel: Model;
  /** How the banner describes the chat model. */
  chatModelLabel: string;
}

/**
 * The demo's embedded defaults: no service, no key. Agents persist as files
 * under the data directory (FileStorage, so a restart keeps them) unless
 * `--storage` says otherwise (see storage-spec.ts); the `chat-*` agents
 * use a real model when OPENAI_API_KEY / OPENAI_BASE_URL or
 * ANTHROPIC_API_KEY is set, the offline echo model otherwise.
 */
export async function embeddedDefaults(where: DemoStorage, env: NodeJS.ProcessEnv, cwd: string, log: Log): Promise<EmbeddedDefaults> {
  const chatModel = modelFromEnv(env, echoModel);
  // Opened (and checked) now, so a bad --data-dir or --storage is one line at start rather than a 500 on the first turn.
  const opened = await openStorage(where, cwd, log);
  return {
    storage: opened.storage,
    storageLabel: opened.label,
    closeStorage: opened.close,
    chatModel,
    chatModelLabel: chatModel.name === 'echo' ? 'the offline echo model (set OPENAI_API_KEY or ANTHROPIC_API_KEY for a real one)' : `the model ${chatModel.name}`,
  };
}
