/**
 * What every TurnChannel must do, checked the same way on Redis and on Postgres: two storages on one
 * backend stand for two processes (`a` writes and asks, `b` reads and holds).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { TurnChannel } from '../../src/storage/turn-channel.ts';

/** One process's side: its storage's channel and its lock. */
export interface ChannelSide {
  turns: TurnChannel;
  lock(agentId: string): Promise<() => Promise<void>>;
}

/** Follows `turnId` (once listening, so no write is missed); each wake resolves the next `woken()`. */
export async function following(channel: TurnChannel, turnId: string): Promise<{ woken: () => Promise<void>; stop: () => void }> {
  let wake: (() => void) | undefined;
  let pending = 0;
  const stop = await channel.follow(turnId, () => {
    if (wake === undefined) pending++;
    else wake();
  });
  const woken = (): Promise<void> => {
    if (pending > 0) {
      pending--;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      wake = () => {
        wake = undefined;
        resolve();
      };
    });
  };
  return { woken, stop };
}

/** Fails clearly instead of hanging the run. */
export function within<T>(work: Promise<T>, what: string, ms = 10_000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const watchdog = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`never happened: ${what}`)), ms);
  });
  return Promise.race([work, watchdog]).finally(() => clearTimeout(timer));
}

/** A log written by `a` is read and followed by `b`, trimmed and ended. */
export async function logIsShared(a: ChannelSide, b: ChannelSide): Promise<void> {
  const turnId = randomUUID();
  assert.equal(await b.turns.read(turnId, 0), undefined, 'never written');
  await a.turns.append({ agentId: 'bot', turnId, from: 1, entries: ['"one"', '" two"'], first: 1, ended: false, ttlSeconds: 300 });
  assert.deepEqual(await b.turns.read(turnId, 0), { agentId: 'bot', first: 1, from: 1, entries: ['"one"', '" two"'], ended: false });
  assert.deepEqual(await b.turns.read(turnId, 1), { agentId: 'bot', first: 1, from: 2, entries: ['" two"'], ended: false });
  const follower = await following(b.turns, turnId);
  await a.turns.append({ agentId: 'bot', turnId, from: 3, entries: ['" three"', '{"finished":{}}'], first: 3, ended: true, ttlSeconds: 60 });
  await within(follower.woken(), 'the follower woken by the append');
  follower.stop();
  assert.deepEqual(await b.turns.read(turnId, 0), { agentId: 'bot', first: 3, from: 3, entries: ['" three"', '{"finished":{}}'], ended: true }, 'the entries before first are gone');
  assert.deepEqual(await b.turns.read(turnId, 4), { agentId: 'bot', first: 3, from: 5, entries: [], ended: true });
}

/** A cancel from `a` reaches `b`, which holds the turn; one nobody holds is answered by every process, not its whole wait; busy follows the lock. */
export async function cancelReachesHolder(a: ChannelSide, b: ChannelSide): Promise<void> {
  const asked: unknown[] = [];
  const stop = await b.turns.onCancel((agentId, request) => {
    asked.push([agentId, request]);
    return 'turnId' in request && request.turnId === 't-1' ? ['t-1'] : [];
  });
  assert.deepEqual(await a.turns.cancel('bot', { turnId: 't-1' }, 5000), ['t-1']);
  assert.deepEqual(await within(a.turns.cancel('bot', { turnId: 't-2' }, 60_000), 'every process answering', 5000), [], 'every listener answered: nothing held t-2');
  assert.deepEqual(asked, [['bot', { turnId: 't-1' }], ['bot', { turnId: 't-2' }]]);
  stop();
  assert.deepEqual(await within(a.turns.cancel('bot', { all: true }, 60_000), 'every process answering', 5000), []);
  assert.equal(asked.length, 2, 'a stopped handler hears nothing');
  assert.equal(await a.turns.busy('bot'), false);
  const unlock = await b.lock('bot');
  assert.equal(await a.turns.busy('bot'), true);
  await unlock();
  assert.equal(await a.turns.busy('bot'), false);
}
