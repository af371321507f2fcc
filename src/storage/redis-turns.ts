import { randomUUID } from 'node:crypto';
import { lua, runScript } from './redis-scripts.ts';
import type { RedisClientLike, SendCommand } from './redis-scripts.ts';
import { TurnListeners } from './turn-listeners.ts';
import type { CancelRequest, SharedTurnLog, TurnChannel, TurnLogWrite } from './turn-channel.ts';
import { rethrowOutage } from './outage.ts';

/** How long a live turn's log is kept without a write: the turn timeout is far shorter, so only a crashed writer's log expires this way. */
const LIVE_TTL_SECONDS = 24 * 60 * 60;

/**
 * KEYS: the turn's stream, its meta hash. ARGV: agent id, first, ended (1/0), ttl after the end, live ttl, from, entries...
 * Entries get explicit ids 0-<index>, so a write that comes twice (a retried append) is refused, not doubled.
 */
const APPEND = lua(`
local from = tonumber(ARGV[6])
for i = 7, #ARGV do
  local id = '0-' .. (from + i - 7)
  local ok = pcall(redis.call, 'XADD', KEYS[1], id, 'e', ARGV[i])
end
redis.call('HSET', KEYS[2], 'agent', ARGV[1], 'first', ARGV[2])
if tonumber(ARGV[2]) > 1 then redis.call('XTRIM', KEYS[1], 'MINID', '0-' .. ARGV[2]) end
local ttl = ARGV[5]
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[2], 'ended', '1')
  ttl = ARGV[4]
end
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[2], ttl)
return 1
`);

/** KEYS: the stream, the meta hash. ARGV: the first index wanted. Returns {agent, first, ended, id1, e1, id2, e2, ...}. */
const READ = lua(`
local meta = redis.call('HMGET', KEYS[2], 'agent', 'first', 'ended')
if not meta[1] then return false end
local first = tonumber(meta[2])
local from = math.max(tonumber(ARGV[1]), first)
local out = { meta[1], meta[2], meta[3] or '0' }
for _, item in ipairs(redis.call('XRANGE', KEYS[1], '0-' .. from, '+')) do
  table.insert(out, item[1])
  table.insert(out, item[2][2])
end
return out
`);

/** A connection in subscriber mode: the client's duplicate, node-redis's or ioredis's. */
interface Subscriber {
  subscribe(channel: string, listener: (message: string) => void): Promise<void>;
  close(): Promise<void>;
}

/** What a cancel request and its answers carry on the pub/sub channels. */
interface CancelMessage {
  readonly req: string;
  readonly agentId: string;
  readonly request: CancelRequest;
}

/**
 * `TurnChannel` on Redis, through the user's client: a stream per turn
 * (`{prefix}turn:{id}`) and a meta hash, live tail and cancel over pub/sub
 * on one duplicate of the client, made at the first follow or onCancel.
 */
const OUTAGE = rethrowOutage('redisStorage');

export class RedisTurnChannel implements TurnChannel {
  readonly #send: SendCommand;
  readonly #client: RedisClientLike;
  readonly #prefix: string;
  readonly #lockKey: (agentId: string) => string;
  #subscriber: Promise<Subscriber> | undefined;
  readonly #listeners = new TurnListeners();

  constructor(client: RedisClientLike, send: SendCommand, prefix: string, lockKey: (agentId: string) => string) {
    this.#client = client;
    // As the storage's own commands: a Redis that cannot be reached is 503 storage_unavailable to whoever asked.
    this.#send = (command) => send(command).catch(OUTAGE);
    this.#prefix = prefix;
    this.#lockKey = lockKey;
  }

  async append(write: TurnLogWrite): Promise<void> {
    const { turnId, agentId, from, entries, first, ended, ttlSeconds } = write;
    const args = [agentId, String(first), ended ? '1' : '0', String(Math.max(1, Math.ceil(ttlSeconds))), String(LIVE_TTL_SECONDS), String(from), ...entries];
    await runScript(this.#send, APPEND, this.#keys(turnId), args);
    await this.#send(['PUBLISH', `${this.#prefix}turn-events`, turnId]);
  }

  async read(turnId: string, after: number): Promise<SharedTurnLog | undefined> {
    const reply = (await runScript(this.#send, READ, this.#keys(turnId), [String(after + 1)])) as unknown[] | null;
    if (!Array.isArray(reply)) return undefined;
    const [agentId, first, ended] = reply.map(String) as [string, string, string];
    const entries: string[] = [];
    let from = 0;
    for (let i = 3; i < reply.length; i += 2) {
      if (from === 0) from = Number(String(reply[i]).slice(2));
      entries.push(String(reply[i + 1]));
    }
    return { agentId, first: Number(first), from: from === 0 ? Math.max(after + 1, Number(first)) : from, entries, ended: ended === '1' };
  }

  async follow(turnId: string, wake: () => void): Promise<() => void> {
    await this.#subscribed();
    return this.#listeners.follow(turnId, wake);
  }

  async busy(agentId: string): Promise<boolean> {
    return Number(await this.#send(['EXISTS', this.#lockKey(agentId)])) === 1;
  }

  async cancel(agentId: string, request: CancelRequest, waitMs: number): Promise<string[]> {
    await this.#subscribed();
    const req = randomUUID();
    const message: CancelMessage = { req, agentId, request };
    // PUBLISH says how many listeners heard it: each answers once, even with nothing cancelled.
    const publish = async (): Promise<number> => Number(await this.#send(['PUBLISH', `${this.#prefix}turn-cancel`, JSON.stringify(message)]));
    return this.#listeners.gather(req, request, waitMs, publish);
  }

  async onCancel(handler: (agentId: string, request: CancelRequest) => string[]): Promise<() => void> {
    await this.#subscribed();
    return this.#listeners.onCancel(handler);
  }

  /** Closes the subscriber connection, if one was made. */
  async close(): Promise<void> {
    const subscriber = this.#subscriber;
    this.#subscriber = undefined;
    if (subscriber !== undefined) await (await subscriber.catch(() => undefined))?.close();
  }

  #keys(turnId: string): [string, string] {
    return [`${this.#prefix}{turn:${turnId}}:events`, `${this.#prefix}{turn:${turnId}}:meta`];
  }

  #subscribed(): Promise<Subscriber> {
    if (this.#subscriber !== undefined) return this.#subscriber;
    const subscribing = (async () => {
      const subscriber = await duplicate(this.#client);
      try {
        await subscriber.subscribe(`${this.#prefix}turn-events`, (turnId) => {
          this.#listeners.wake(turnId);
        });
        await subscriber.subscribe(`${this.#prefix}turn-cancelled`, (text) => {
          const { req, ids } = JSON.parse(text) as { req: string; ids: string[] };
          this.#listeners.answered(req, ids);
        });
        await subscriber.subscribe(`${this.#prefix}turn-cancel`, (text) => this.#heard(JSON.parse(text) as CancelMessage));
      } catch (error) {
        // Refused (a Redis ACL without the prefix's channels): the connection made for it goes too.
        await subscriber.close();
        throw error;
      }
      return subscriber;
    })().catch(OUTAGE);
    this.#subscriber = subscribing;
    subscribing.catch(() => {
      if (this.#subscriber === subscribing) this.#subscriber = undefined;
    });
    return subscribing;
  }

  /** A cancel request from some process: each handler cancels what it holds, and the answer says which. */
  #heard({ req, agentId, request }: CancelMessage): void {
    const ids = this.#listeners.cancelHere(req, agentId, request);
    this.#send(['PUBLISH', `${this.#prefix}turn-cancelled`, JSON.stringify({ req, ids })]).catch(() => {});
  }
}

/** A subscriber connection from the user's client: node-redis's `duplicate()` connects on `connect()`, ioredis's at once. */
async function duplicate(client: RedisClientLike): Promise<Subscriber> {
  const source = client as unknown as { duplicate?: () => unknown };
  if (typeof source.duplicate !== 'function') {
    throw new TypeError('redisStorage: rejoining or cancelling a turn across processes needs a client with duplicate() (node-redis or ioredis)');
  }
  const copy = source.duplicate() as Record<string, (...args: unknown[]) => unknown>;
  if (typeof copy['call'] === 'function') {
    // ioredis: one 'message' listener for every channel.
    const listeners = new Map<string, (message: string) => void>();
    (copy['on'] as (event: string, listener: (channel: string, message: string) => void) => void).call(copy, 'message', (channel, message) => listeners.get(channel)?.(message));
    (copy['on'] as (event: string, listener: () => void) => void).call(copy, 'error', () => {});
    return {
      subscribe: async (channel, listener) => {
        listeners.set(channel, listener);
        await (copy['subscribe'] as (channel: string) => Promise<unknown>).call(copy, channel);
      },
      close: async () => {
        (copy['disconnect'] as () => void).call(copy);
      },
    };
  }
  (copy['on'] as (event: string, listener: () => void) => void).call(copy, 'error', () => {});
  await (copy['connect'] as () => Promise<unknown>).call(copy);
  return {
    subscribe: async (channel, listener) => {
      await (copy['subscribe'] as (channel: string, listener: (message: string) => void) => Promise<unknown>).call(copy, channel, listener);
    },
    close: async () => {
      // close() from node-redis 5 on, quit() before it.
      const close = (copy['close'] ?? copy['quit']) as () => Promise<unknown>;
      await Promise.resolve(close.call(copy)).catch(() => {});
    },
  };
}
