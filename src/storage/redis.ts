import { randomBytes } from 'node:crypto';
import { LockLostError, VersionConflictError } from '../errors.ts';
import { checkKnownOptions } from '../options.ts';
import type { ChatMessage, JsonObject } from '../types.ts';
import { checkRecord, checkTurn, damagedRecord } from './check.ts';
import { assertStorableId, leaseMilliseconds } from './ids.ts';
import { rethrowOutage } from './outage.ts';
import { firstVersion } from './record-version.ts';
import { ACQUIRE, closedForGood, COMMIT, commandSender, connectedNow, LOAD, LOAD_SINCE, RELEASE, RENEW, runScript } from './redis-scripts.ts';
import type { LuaScript, RedisClientLike, SendCommand } from './redis-scripts.ts';
import type { AgentRecord, SharedStorage, TurnCommit, Unlock } from './storage.ts';
import { RedisTurnChannel } from './redis-turns.ts';
import { backoff, delay, untilAborted } from './wait.ts';

export type { IoRedisLike, NodeRedisLike, RedisClientLike } from './redis-scripts.ts';

export interface RedisStorageOptions {
  /** Prepended to every key, e.g. to share one Redis between apps. @defaultValue "agent-router:" */
  prefix?: string | undefined;
  /**
   * A held lock's lease (`SET ... NX PX`); the holder extends it every third
   * of that while the turn runs, so only a holder that died or stalled loses
   * it, and the id is free again at most this long after.
   * @defaultValue 30
   */
  leaseSeconds?: number | undefined;
  /**
   * Share turn control with the other processes on this Redis: rejoin a
   * stream, cancel a turn, `whenBusy` through any of them. It opens a
   * subscriber connection (the client's `duplicate()`) once the process
   * serves a turn, until `storage.close()`. Off, turn control stays in each process.
   * @defaultValue false
   */
  shareTurns?: boolean | undefined;
  /** Extend held leases (default true). `false` acts like a holder that died: for tests. @internal */
  renewLease?: boolean | undefined;
}

/** An error reply from the server (`ERR ...`, `WRONGTYPE ...`): the command reached it. Otherwise the client failed to send it or lost its answer. */
function repliedByServer(error: unknown): boolean {
  return /^[A-Z][A-Z_]+ /.test(String((error as { message?: unknown } | null)?.message));
}

/** A Storage on Redis, with the cross-process members always present. */
export type RedisStorage = SharedStorage;

/**
 * Storage on a Redis client you own and have connected: node-redis
 * (`createClient()` from the `redis` package, v4+) or ioredis. It is told
 * apart by shape: anything with ioredis's `call(command, ...args)` or
 * node-redis's `sendCommand(args)` works. Not supported: a node-redis
 * *cluster* client (its sendCommand takes other arguments; an ioredis
 * Cluster works) and node-redis v4's `legacyMode` (pass `client.v4`).
 *
 * A commit is one Lua script: compare the version, RPUSH the messages, SET
 * the state and the version, so its cost does not depend on the history's
 * length. `lock` is a lease, `SET key token NX PX lease` (a script that also
 * takes a lock already its token's), renewed while held and released by a
 * compare-and-delete script; a writer whose lease expired
 * is fenced by the version check at commit.
 *
 * @example
 * import { createClient } from 'redis';
 * const client = createClient({ url: process.env.REDIS_URL });
 * client.on('error', (error) => console.error('redis:', error.message)); // unheard, a lost connection ends the process
 * await client.connect();
 * const storage = redisStorage(client);
 */
const REDIS_OPTIONS: { readonly [K in keyof Required<RedisStorageOptions>]: true } = { prefix: true, leaseSeconds: true, shareTurns: true, renewLease: true };

export function redisStorage(client: RedisClientLike, options: RedisStorageOptions = {}): RedisStorage {
  checkKnownOptions(options, REDIS_OPTIONS, 'redisStorage');
  return new RedisStorageImpl(client, commandSender(client), () => closedForGood(client), () => connectedNow(client), options);
}

class RedisStorageImpl implements RedisStorage {
  readonly #send: SendCommand;
  readonly #closed: () => boolean;
  readonly #connected: () => boolean;
  readonly #prefix: string;
  readonly #leaseMs: number;
  readonly #renew: boolean;
  /** The locks this storage holds: each id's release, and the token the commit shows. */
  readonly #held = new Map<string, { unlock: () => Promise<void>; token: string }>();
  /** What every public method's failure goes through: a client that cannot reach Redis becomes 503 storage_unavailable. */
  readonly #outage = rethrowOutage('redisStorage');

  /** Turn events and cancel requests between the processes sharing this Redis. */
  readonly turns: RedisTurnChannel | undefined;

  constructor(client: RedisClientLike, send: SendCommand, closed: () => boolean, connected: () => boolean, options: RedisStorageOptions) {
    this.#send = send;
    this.#closed = closed;
    this.#connected = connected;
    const prefix = options.prefix ?? 'agent-router:';
    if (typeof prefix !== 'string') throw new TypeError('redisStorage: prefix must be a string, e.g. "myapp:agents:"');
    this.#prefix = prefix;
    this.#leaseMs = leaseMilliseconds(options.leaseSeconds, 30, 'redisStorage');
    this.#renew = options.renewLease ?? true;
    if (options.shareTurns === true) this.turns = new RedisTurnChannel(client, send, prefix, (agentId) => this.#lockKey(agentId));
  }

  head(agentId: string): Promise<number> {
    return this.#head(agentId).catch(this.#outage);
  }

  load(agentId: string): Promise<AgentRecord | undefined> {
    return this.#read(agentId, LOAD, []).catch(this.#outage);
  }

  loadSince(agentId: string, known: { version: number; messages: number }): Promise<AgentRecord | undefined> {
    return this.#read(agentId, LOAD_SINCE, [String(known.messages)]).catch(this.#outage);
  }

  commit(agentId: string, turn: TurnCommit): Promise<number> {
    return this.#commit(agentId, turn).catch(this.#outage);
  }

  delete(agentId: string): Promise<void> {
    return this.#delete(agentId).catch(this.#outage);
  }

  lock(agentId: string, signal?: AbortSignal): Promise<Unlock> {
    return this.#lock(agentId, signal).catch(this.#outage);
  }

  async #head(agentId: string): Promise<number> {
    const [version] = this.#keys(agentId);
    const value = await this.#send(['GET', version]);
    return value === null || value === undefined ? 0 : Number(value);
  }

  async #read(agentId: string, script: LuaScript, args: string[]): Promise<AgentRecord | undefined> {
    const reply = (await runScript(this.#send, script, this.#keys(agentId), args)) as [unknown, unknown, unknown[]];
    const [version, state, history] = reply;
    if (version === null || version === undefined) return undefined;
    let record: AgentRecord;
    try {
      record = {
        state: JSON.parse(String(state)) as JsonObject,
        messages: history.map((item) => JSON.parse(String(item)) as ChatMessage),
        version: Number(version),
      };
    } catch {
      throw damagedRecord(agentId, 'redisStorage', 'its state or a history entry is not JSON');
    }
    return checkRecord(record, agentId, 'redisStorage');
  }

  async #commit(agentId: string, turn: TurnCommit): Promise<number> {
    const keys = [...this.#keys(agentId), this.#lockKey(agentId)];
    checkTurn(turn, 'redisStorage');
    // The token makes the commit check, in the same script, that the lock is still this process's.
    const token = this.#held.get(agentId)?.token ?? '';
    const first = turn.expectedVersion === 0 ? String(firstVersion()) : '';
    const args = [String(turn.expectedVersion), JSON.stringify(turn.state), token, first, ...turn.append.map((message) => JSON.stringify(message))];
    let reply: unknown;
    try {
      reply = await runScript(this.#send, COMMIT, keys, args);
    } catch (error) {
      // The reply may be what was lost, the commit applied. Run again under the same lock token, the script answers
      // {1, version} for a commit it applied and applies one it had not; without a token, the error stands.
      if (token === '' || this.#closed()) throw error;
      reply = await this.#commitAgain(keys, args);
    }
    const [ok, version] = reply as [unknown, unknown];
    if (Number(ok) === -1) throw new LockLostError(agentId, 'redisStorage', 'its lease ran out');
    if (Number(ok) !== 1) throw new VersionConflictError(agentId, turn.expectedVersion, Number(version));
    return Number(version);
  }

  /**
   * Runs a commit whose answer was lost again until the server answers. A client that fails
   * commands while it reconnects (node-redis with disableOfflineQueue) refuses the first try at
   * once, which reported a commit that may have been applied as failed. Bounded by the lease, past
   * which the answer is lock_lost anyway. A client closed for good (quit() at shutdown) will never
   * answer: the error stands at once, instead of holding the turn for the whole lease.
   */
  async #commitAgain(keys: string[], args: string[]): Promise<unknown> {
    const until = Date.now() + this.#leaseMs;
    for (let attempt = 0; ; attempt++) {
      try {
        return await runScript(this.#send, COMMIT, keys, args);
      } catch (error) {
        if (repliedByServer(error) || this.#closed() || Date.now() >= until) throw error;
        await delay(backoff(attempt, 200));
      }
    }
  }

  async #delete(agentId: string): Promise<void> {
    await this.#send(['DEL', ...this.#keys(agentId)]);
  }

  async #lock(agentId: string, signal?: AbortSignal): Promise<Unlock> {
    const key = this.#lockKey(agentId);
    const token = randomBytes(16).toString('hex');
    const lease = String(this.#leaseMs);
    try {
      for (let attempt = 0; ; attempt++) {
        signal?.throwIfAborted();
        // Given up when the turn is: a client that cannot reach Redis may queue the command for ever.
        const taken = await untilAborted(runScript(this.#send, ACQUIRE, [key], [token, lease]), signal);
        if (Number(taken) === 1) break;
        await delay(backoff(attempt), signal);
      }
    } catch (error) {
      // The lock may be this token's all the same (its reply lost, or sent on reconnect): a release sent now follows it
      // in order and frees it, where it would keep the id from every process for the whole lease.
      runScript(this.#send, RELEASE, [key], [token]).catch(() => undefined);
      throw error;
    }
    let timer: NodeJS.Timeout | undefined;
    if (this.#renew) {
      // unref: a held lease must not keep an otherwise finished process alive.
      timer = setInterval(() => {
        runScript(this.#send, RENEW, [key], [token, lease]).then(
          (renewed) => {
            if (Number(renewed) !== 1) clearInterval(timer);
          },
          () => undefined, // retried next tick; if every try fails the lease expires, as leases do
        );
      }, Math.max(1, Math.floor(this.#leaseMs / 3))).unref();
    }
    let unlocked = false;
    const unlock = async (): Promise<void> => {
      if (unlocked) return;
      unlocked = true;
      clearInterval(timer);
      if (this.#held.get(agentId)?.unlock === unlock) this.#held.delete(agentId);
      // Not rethrown: the turn has completed, and a lock this process fails
      // to delete expires after the lease anyway.
      const release = runScript(this.#send, RELEASE, [key], [token]).catch(() => undefined);
      // The turn's answer waits on this, so not while the client cannot reach Redis (it sends the release
      // once it can; ioredis may hold it for ever), nor past the lease, when the lock is gone anyway.
      const until = Date.now() + this.#leaseMs;
      let watch: NodeJS.Timeout | undefined;
      const unreachable = new Promise<void>((resolve) => {
        const check = (): void => {
          if (!this.#connected() || Date.now() >= until) resolve();
        };
        check();
        watch = setInterval(check, 50);
      });
      await Promise.race([release, unreachable]);
      clearInterval(watch);
    };
    this.#held.set(agentId, { unlock, token });
    return unlock;
  }

  /** Stops renewals and releases held locks. The client stays open: it is yours to close. */
  async close(): Promise<void> {
    const held = [...this.#held.values()];
    this.#held.clear();
    await Promise.all([...held.map(({ unlock }) => unlock()), this.turns?.close()]);
  }

  #keys(agentId: string): [string, string, string] {
    const base = this.#base(agentId);
    return [`${base}:v`, `${base}:s`, `${base}:h`];
  }

  #lockKey(agentId: string): string {
    return `${this.#base(agentId)}:l`;
  }

  #base(agentId: string): string {
    // NUL is fine in a Redis key; lone surrogates are not (they would turn into U+FFFD on the way).
    assertStorableId(agentId, 'redisStorage', { allowNul: true });
    return `${this.#prefix}{${agentId}}`;
  }
}
