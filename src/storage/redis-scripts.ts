/**
 * The Lua scripts of redisStorage and the one-function bridge to the user's
 * client. Each script runs atomically on the server: no other command runs
 * between its reads and its writes.
 *
 * Keys per agent id (the braces are a Redis Cluster hash tag, so one agent's
 * keys live in one slot and a script may touch them all):
 *   <prefix>{<id>}:v  version (string integer; absent = 0)
 *   <prefix>{<id>}:s  state (JSON string)
 *   <prefix>{<id>}:h  history (list of JSON strings, oldest first)
 *   <prefix>{<id>}:l  lock (random token, with a PX expiry)
 */
import { createHash } from 'node:crypto';

export interface LuaScript {
  source: string;
  sha: string;
}

export function lua(source: string): LuaScript {
  return { source, sha: createHash('sha1').update(source).digest('hex') };
}

/**
 * KEYS: v, s, h, lock. ARGV: expected version, state JSON, the lock token
 * the committer holds ('' if none), the version to give a new record (see
 * record-version.ts), then one JSON string per message.
 * Returns {1, new version}; {-1, current version} when the lock is no longer
 * that token's (its lease ran out: another process may be mid-turn); {0,
 * current version} when the stored version is not the expected one (nothing
 * written in either case). Run again after it succeeded (a client that
 * re-sends a command whose reply was lost, as ioredis does by default), it
 * answers {1, that version} once more without writing: under the same lock
 * token nobody else can have moved the version on, and the state is this
 * commit's. Writes the version
 * last: Redis does not roll a failed script back, so a script stopped
 * half-way (out of memory) leaves the version, which fences every writer,
 * where it was.
 */
export const COMMIT = lua(`
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if ARGV[3] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[3] then
  return {-1, current}
end
local expected = tonumber(ARGV[1])
local committed = expected == 0 and tonumber(ARGV[4]) or expected + 1
if current ~= expected then
  if ARGV[3] ~= '' and current == committed and redis.call('GET', KEYS[2]) == ARGV[2] then
    return {1, current}
  end
  return {0, current}
end
for i = 5, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[3], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[1], committed)
return {1, committed}
`);

/** KEYS: v, s, h. Returns {version or false, state or false, history list}, read at one instant. */
export const LOAD = lua(`
return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2]), redis.call('LRANGE', KEYS[3], 0, -1)}
`);

/** KEYS: v, s, h. ARGV: messages already known. As LOAD, with the history from that index on. */
export const LOAD_SINCE = lua(`
return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2]), redis.call('LRANGE', KEYS[3], tonumber(ARGV[1]), -1)}
`);

/**
 * KEYS: lock. ARGV: token, lease ms. Takes the lock if it is free, or if it is
 * this token's already: a command sent again after its reply was lost (as
 * ioredis does on reconnecting) must not find the lock taken by itself and
 * wait out its own lease. 1 when taken, 0 when another token holds it.
 */
export const ACQUIRE = lua(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`);

/** KEYS: lock. ARGV: token, lease ms. Extends the lease only if this token still holds it; 1 or 0. */
export const RENEW = lua(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`);

/** KEYS: lock. ARGV: token. Deletes the lock only if this token still holds it; 1 or 0. */
export const RELEASE = lua(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`);

/** ioredis (v5+): `redis.call(command, ...args)`. Also an ioredis Cluster, which routes by key. */
export interface IoRedisLike {
  call(command: string, ...args: string[]): Promise<unknown>;
}

/** node-redis (package `redis`, v4+): `client.sendCommand(args)`. */
export interface NodeRedisLike {
  sendCommand(args: string[]): Promise<unknown>;
}

/** The clients redisStorage accepts; it tells them apart by these methods. */
export type RedisClientLike = IoRedisLike | NodeRedisLike;

/** Sends one raw command (`['SET', key, value]`) through whichever client it was given. */
export type SendCommand = (args: string[]) => Promise<unknown>;

export function commandSender(client: RedisClientLike): SendCommand {
  // ioredis also has a `sendCommand`, taking a Command object, so `call` is tested first.
  if (typeof (client as Partial<IoRedisLike>)?.call === 'function') {
    const io = client as IoRedisLike;
    return (args) => io.call(args[0] as string, ...args.slice(1));
  }
  if (typeof (client as Partial<NodeRedisLike>)?.sendCommand === 'function') {
    const node = client as NodeRedisLike;
    return (args) => node.sendCommand(args);
  }
  throw new TypeError(
    'redisStorage: pass a connected node-redis client (createClient() from "redis", after await client.connect()) ' +
      'or an ioredis client (new Redis() from "ioredis"); got an object with neither sendCommand() nor call()',
  );
}

/**
 * Whether the client was closed by its owner for good, so a command will never be answered:
 * node-redis after close()/quit()/destroy() (`isOpen` false; true while it reconnects, with
 * `isReady` false), ioredis after quit()/disconnect() or once it gave up reconnecting (`status`
 * 'end'; 'reconnecting' or 'connecting' while it reconnects). A client with neither is never.
 */
export function closedForGood(client: RedisClientLike): boolean {
  const { isOpen, status } = client as { isOpen?: unknown; status?: unknown };
  return isOpen === false || status === 'end';
}

/**
 * Whether the client is connected now, as far as it tells: false while it
 * reconnects or once closed (node-redis `isReady`, ioredis `status`). A
 * client with neither always is.
 */
export function connectedNow(client: RedisClientLike): boolean {
  const { isReady, status } = client as { isReady?: unknown; status?: unknown };
  return isReady !== false && (status === undefined || status === 'ready');
}

/** Runs a script by its SHA1, loading it with EVAL the first time a server has not seen it. */
export async function runScript(send: SendCommand, script: LuaScript, keys: string[], args: string[]): Promise<unknown> {
  const tail = [String(keys.length), ...keys, ...args];
  try {
    return await send(['EVALSHA', script.sha, ...tail]);
  } catch (error) {
    if (!String((error as Error)?.message).startsWith('NOSCRIPT')) throw error;
    return send(['EVAL', script.source, ...tail]);
  }
}
