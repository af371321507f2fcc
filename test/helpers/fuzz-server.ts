import type { IncomingMessage } from 'node:http';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouterError } from '../../src/errors.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { echoModel } from '../../src/models/echo.ts';
import { scriptedModel } from '../../src/models/scripted.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import type { JsonObject } from '../../src/types.ts';
import { BODY_LIMIT } from './fuzz-json.ts';
import { MAX_ID_LENGTH, PREFIX } from './fuzz-requests.ts';
import { SECRET } from './fuzz-oracle.ts';

/** What the fuzz server logged that was not a deliberate failure (there should be none). */
export interface Logged {
  message: string;
  error: unknown;
}

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Refusals the router logs as 5xx although nothing broke: load shedding and a turn past its time. */
const EXPECTED_5XX = new Set(['too_many_streams', 'turn_timeout', 'shutting_down']);

/**
 * True when a logged error is one the fuzz server raised on purpose (it, or
 * one of its causes, carries SECRET), or a refusal the limits call for.
 */
export function isExpected(error: unknown): boolean {
  if (error instanceof AgentRouterError && EXPECTED_5XX.has(error.code)) return true;
  for (let e = error, i = 0; e instanceof Error && i < 5; e = e.cause, i++) if (e.message.includes(SECRET)) return true;
  return false;
}

/**
 * The router under fuzz: counters whose actions check their params as a
 * careful user's would, echo agents, slow streamers, agents whose model
 * fails on purpose (`boom-*`), and an authorize hook driven by `x-auth`.
 * Limits are small so the fuzz reaches every refusal: 413, 429, 503.
 * `dropData()` forgets every agent's state and history, so a heap
 * measurement sees only what the router itself keeps. `stray` collects the
 * logged errors that are not deliberate; the deliberate ones are only
 * counted, since keeping each (stack and causes, ~2 KB) read as a leak of
 * the router's in a long run (+16 MiB after 200,000 requests).
 */
export function fuzzRouter(): { router: AgentRouter; stray: Logged[]; deliberate: () => number; dropData: () => void } {
  let storage = new MemoryStorage();
  const stray: Logged[] = [];
  let deliberate = 0;

  class Counter extends Agent<JsonObject> {
    static override actions = ['increment', 'add', 'echo', 'merge', 'explode'];
    constructor(id: string) {
      super(id, { model: echoModel(), storage, initialState: { count: 0 } });
    }
    async increment(options?: unknown): Promise<number> {
      const by = typeof options === 'object' && options !== null ? (options as { by?: unknown }).by : undefined;
      const count = Number(this.state['count']) + (typeof by === 'number' && Number.isFinite(by) ? by : 1);
      await this.setState({ count });
      return count;
    }
    add(a: unknown, b: unknown): number {
      if (typeof a !== 'number' || typeof b !== 'number') throw new AgentRouterError(400, 'bad_params', 'add takes two numbers, e.g. [2, 3]');
      return a + b;
    }
    echo(...args: unknown[]): unknown[] {
      return args;
    }
    async merge(params?: unknown): Promise<number> {
      if (typeof params !== 'object' || params === null || Array.isArray(params)) throw new AgentRouterError(400, 'bad_params', 'merge takes an object');
      // What careless user code does with wire params: merge them into state and into a fresh object.
      Object.assign({}, params);
      await this.setState(params as JsonObject);
      return Object.keys(this.state).length;
    }
    explode(): never {
      throw new Error(`deliberate failure ${SECRET}explode`);
    }
  }

  class Slow extends Agent {
    constructor(id: string) {
      super(id, {
        storage,
        model: scriptedModel(async function* ({ messages }) {
          for (const word of ['one', ' two', ' three']) {
            await tick();
            yield word;
          }
          yield ` (${messages.length})`;
        }),
      });
    }
  }

  class Boom extends Agent {
    constructor(id: string) {
      super(id, {
        storage,
        model: scriptedModel(async function* () {
          yield 'about to fail';
          await tick();
          throw new Error(`deliberate failure ${SECRET}boom`);
        }),
      });
    }
  }

  class Echo extends Agent {
    constructor(id: string) {
      super(id, { model: echoModel(), storage });
    }
  }

  const registry = new AgentRegistry();
  registry.register('counter-[0-9]+', Counter);
  registry.register('slow-.*', Slow);
  registry.register('boom-.*', Boom);
  registry.register(/(?!nobody-).*/s, Echo);

  const router = new AgentRouter(registry, {
    prefix: PREFIX,
    bodyLimit: BODY_LIMIT,
    maxIdLength: MAX_ID_LENGTH,
    maxAgents: 4,
    maxStreams: 2,
    turnTimeout: 10,
    idleTimeout: 0,
    pingInterval: 0,
    cors: { origins: ['https://ok.example'] },
    authorize: authorizeByHeader,
    logger: {
      error: (message, error) => {
        if (isExpected(error)) deliberate++;
        else stray.push({ message, error });
      },
    },
  });

  const dropData = (): void => {
    router.pool?.clear();
    storage = new MemoryStorage();
  };
  return { router, stray, deliberate: () => deliberate, dropData };
}

/** `x-auth`: deny, 401, 403, crash (a hook bug), async-deny; anything else allows. `deny-me` is always refused. */
function authorizeByHeader(req: IncomingMessage, { agentId }: { agentId: string }): boolean | Promise<boolean> {
  const auth = req.headers['x-auth'];
  if (auth === 'crash') throw new Error(`deliberate failure ${SECRET}authorize`);
  if (auth === '401') throw Object.assign(new Error('Log in first'), { status: 401 });
  if (auth === '403') throw Object.assign(new Error(''), { status: 403 });
  if (auth === 'async-deny') return Promise.resolve(false);
  return auth !== 'deny' && agentId !== 'deny-me';
}
