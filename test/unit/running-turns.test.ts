import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it, mock } from 'node:test';
import { RunningTurns, type RunningTurn } from '../../src/router/running-turns.ts';

interface Turn extends RunningTurn {
  readonly name: string;
}

function turn(name: string, timed = true): Turn {
  return { name, timed, began: 0, older: undefined, newer: undefined };
}

const names = (turns: RunningTurns<Turn>): string[] => turns.list().map((t) => t.name);

describe('RunningTurns', () => {
  beforeEach(() => mock.timers.enable({ apis: ['setInterval', 'Date'], now: 1_000_000 }));
  afterEach(() => mock.timers.reset());

  it('lists turns oldest first and unlinks any of them, once', () => {
    const turns = new RunningTurns<Turn>(0, () => assert.fail('nothing expires without a timeout'));
    const [a, b, c] = [turn('a'), turn('b'), turn('c')];
    for (const t of [a, b, c]) turns.add(t);
    assert.deepEqual(names(turns), ['a', 'b', 'c']);
    turns.delete(b);
    turns.delete(b);
    assert.deepEqual(names(turns), ['a', 'c']);
    assert.equal(b.older, undefined, 'an unlinked record keeps no neighbour alive');
    assert.equal(b.newer, undefined);
    turns.delete(a);
    turns.delete(c);
    assert.deepEqual(names(turns), []);
    turns.add(b);
    assert.deepEqual(names(turns), ['b']);
  });

  it('cuts timed turns once the timeout passed, oldest first, and never a turn still in time or an untimed one', () => {
    const expired: string[] = [];
    const turns = new RunningTurns<Turn>(4, (t) => expired.push(t.name));
    const remote = turn('remote', false);
    turns.add(remote);
    turns.add(turn('first'));
    mock.timers.tick(2_000);
    turns.add(turn('second'));
    // The check runs every second (a quarter of 4 s): 'first' is due at 4 s and cut by the check at 4 s.
    mock.timers.tick(1_000);
    assert.deepEqual(expired, []);
    mock.timers.tick(1_000);
    assert.deepEqual(expired, ['first']);
    assert.deepEqual(names(turns), ['remote', 'second']);
    mock.timers.tick(2_000);
    assert.deepEqual(expired, ['first', 'second']);
    mock.timers.tick(60_000);
    assert.deepEqual(names(turns), ['remote'], 'a remote turn is never cut by this timeout');
  });

  it('goes on cutting when cutting one turn ended the next one at once', () => {
    const expired: string[] = [];
    const [a, b, c] = [turn('a'), turn('b'), turn('c')];
    const turns = new RunningTurns<Turn>(1, (t) => {
      expired.push(t.name);
      // As when the aborted turn hands its agent to the next request, which answers at once.
      if (t === a) turns.delete(b);
    });
    for (const t of [a, b, c]) turns.add(t);
    mock.timers.tick(1_000);
    assert.deepEqual(expired, ['a', 'c']);
    assert.deepEqual(names(turns), []);
  });

  it('stops its interval when no timed turn is left, and starts it again for the next', () => {
    const expired: string[] = [];
    const turns = new RunningTurns<Turn>(2, (t) => expired.push(t.name));
    const a = turn('a');
    turns.add(a);
    turns.delete(a);
    mock.timers.tick(1_000);
    // The sweep found nothing timed and cleared the interval: a later turn restarts it and is still cut.
    const b = turn('b');
    turns.add(b);
    mock.timers.tick(2_000);
    assert.deepEqual(expired, ['b']);
  });
});
