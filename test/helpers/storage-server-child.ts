/**
 * A child process for the storage e2e tests: an AgentServer on port 0 whose
 * agents keep their state in the storage named by the JSON argument, so
 * several of these can share one Postgres, Redis or directory.
 *
 *   node [--import tsx] test/helpers/storage-server-child.ts '{"backend":"postgres","schema":"s"}'
 *
 * Agents: `counter-*` has the action `increment({by})`; `slow-*` chats with a
 * model that says thirty words, one every 100 ms; every other id chats with
 * the echo model (the reply is the message). Prints `listening on <url>`
 * once serving; SIGTERM closes it gracefully.
 */
import { Agent } from '../../src/agent/agent.ts';
import { echoModel } from '../../src/models/echo.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentServer } from '../../src/server/server.ts';
import { FileStorage } from '../../src/storage/file.ts';
import { postgresStorage } from '../../src/storage/postgres.ts';
import { redisStorage } from '../../src/storage/redis.ts';
import type { Storage } from '../../src/storage/storage.ts';
import { counterOn } from './agents.ts';

export interface ChildConfig {
  backend: 'file' | 'postgres' | 'node-redis' | 'ioredis';
  dir?: string | undefined;
  schema?: string | undefined;
  prefix?: string | undefined;
  /** Postgres `application_name` of the child's connections, so a test can tell when a killed child's sessions are gone. */
  applicationName?: string | undefined;
  /** The storage's lease (Redis: how long a killed child's lock holds its id). */
  leaseSeconds?: number | undefined;
  /** Turn control shared through the storage (rejoin, cancel, whenBusy across processes). */
  shareTurns?: boolean | undefined;
}

const config = JSON.parse(process.argv[2] ?? '{}') as ChildConfig;
const closers: Array<() => Promise<unknown>> = [];

async function openStorage(): Promise<Storage> {
  switch (config.backend) {
    case 'file':
      return new FileStorage(config.dir as string, { leaseSeconds: config.leaseSeconds });
    // Drivers load on demand: each is a few hundred milliseconds of startup, paid 20 times by the crash test.
    case 'postgres': {
      const { default: pg } = await import('pg');
      const pool = new pg.Pool({ host: '127.0.0.1', database: 'test', user: 'postgres', max: 8, application_name: config.applicationName });
      pool.on('error', () => undefined);
      closers.push(() => pool.end());
      return postgresStorage(pool, { schema: config.schema, leaseSeconds: config.leaseSeconds, shareTurns: config.shareTurns });
    }
    case 'node-redis': {
      const { createClient } = await import('redis');
      const client = createClient({ url: 'redis://127.0.0.1:6379' });
      await client.connect();
      closers.push(() => client.close());
      return redisStorage(client, { prefix: config.prefix, leaseSeconds: config.leaseSeconds, shareTurns: config.shareTurns });
    }
    case 'ioredis': {
      const { Redis } = await import('ioredis');
      const client = new Redis('redis://127.0.0.1:6379');
      closers.push(() => client.quit());
      return redisStorage(client, { prefix: config.prefix, leaseSeconds: config.leaseSeconds, shareTurns: config.shareTurns });
    }
    default:
      throw new Error(`storage-server-child: unknown backend ${JSON.stringify(config.backend)}`);
  }
}

const storage = await openStorage();

const Counter = counterOn(storage);

class Chat extends Agent {
  constructor(id: string) {
    super(id, { model: echoModel(), storage });
  }
}

/** Thirty words, one every 100 ms: a turn that stays running while a test rejoins, cancels or interrupts it. */
const slowModel = {
  name: 'slow',
  async *stream(request: { signal: AbortSignal }) {
    for (let i = 1; i <= 30; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      if (request.signal.aborted) return;
      yield `w${i} `;
    }
  },
};

class Slow extends Agent {
  constructor(id: string) {
    super(id, { model: slowModel, storage });
  }
}

const registry = new AgentRegistry();
registry.register('counter-.*', Counter);
registry.register('slow-.*', Slow);
registry.register('.*', Chat);
const server = new AgentServer(registry, { maxAgents: 100 });
await server.serve(0);
process.stdout.write(`listening on ${server.url}\n`);

process.on('SIGTERM', () => {
  void (async () => {
    await server.close();
    await storage.close?.();
    for (const close of closers) await close();
    process.exit(0);
  })();
});
