import assert from 'node:assert/strict';
import { mock, test } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouterError } from '../../src/errors.ts';
import { scriptedModel } from '../../src/models/scripted.ts';
import { AgentPool, type EvictReason } from '../../src/registry/pool.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { deferred } from '../helpers/http.ts';
import { counterOn, type CounterAgent } from '../helpers/agents.ts';

const storage = new MemoryStorage();

const Counter = counterOn(storage);

/** A pool on a hand-moved clock, recording its hooks. */
function makePool(options: { idleTimeout?: number; maxAgents?: number } = {}) {
  const clock = { now: 1_000_000 };
  const created: string[] = [];
  const evicted: Array<[string, EvictReason]> = [];
  const pool = new AgentPool({
    ...options,
    now: () => clock.now,
    onCreate: (agent) => created.push(agent.id),
    onEvict: (agent, reason) => evicted.push([agent.id, reason]),
  });
  const use = (id: string): Agent<any> => {
    const agent = pool.acquire(id, (agentId) => new Counter(agentId));
    pool.release(id);
    return agent;
  };
  return { pool, clock, created, evicted, use };
}

test('an idle instance is dropped after idleTimeout by the timer, and comes back with its state', async (t) => {
  mock.timers.enable({ apis: ['setInterval', 'Date'] });
  t.after(() => mock.timers.reset());
  const created: string[] = [];
  const evicted: Array<[string, EvictReason]> = [];
  const pool = new AgentPool({ idleTimeout: 60, onCreate: (a) => created.push(a.id), onEvict: (a, r) => evicted.push([a.id, r]) });

  const first = pool.acquire('idle-1', (id) => new Counter(id)) as CounterAgent;
  assert.equal(await first.invoke('increment', { by: 5 }), 5);
  pool.release('idle-1');

  mock.timers.tick(59_000);
  assert.equal(pool.peek('idle-1'), first, 'still live before the timeout');
  mock.timers.tick(61_000);
  assert.equal(pool.peek('idle-1'), undefined, 'dropped by the sweep timer');
  assert.deepEqual(evicted, [['idle-1', 'idle']]);

  const second = pool.acquire('idle-1', (id) => new Counter(id)) as CounterAgent;
  assert.notEqual(second, first);
  assert.deepEqual(await second.snapshot(), { count: 5 }, 'the new instance loads the stored state');
  assert.equal(await second.invoke('increment'), 6);
  pool.release('idle-1');
  assert.deepEqual(created, ['idle-1', 'idle-1']);
});

test('sweep drops only instances idle longer than idleTimeout, oldest first', () => {
  const { pool, clock, evicted, use } = makePool({ idleTimeout: 10 });
  use('a');
  clock.now += 6_000;
  use('b');
  clock.now += 5_000; // a idle 11 s, b idle 5 s
  assert.equal(pool.sweep(), 1);
  assert.deepEqual(evicted, [['a', 'idle']]);
  assert.deepEqual(pool.list().map((agent) => agent.id), ['b']);
  clock.now += 5_000;
  assert.equal(pool.sweep(), 1);
  assert.equal(pool.size, 0);
});

test('an instance in use (a request or an open stream) is never evicted, however old', () => {
  const { pool, clock, evicted } = makePool({ idleTimeout: 10, maxAgents: 1 });
  pool.acquire('streaming', (id) => new Counter(id)); // not released: the stream is open
  clock.now += 3_600_000;
  assert.equal(pool.sweep(), 0);
  assert.equal(pool.evict('streaming'), false);
  assert.throws(() => pool.acquire('other', (id) => new Counter(id)), { status: 429 });
  assert.deepEqual(evicted, []);
  pool.release('streaming');
  clock.now += 11_000;
  assert.equal(pool.sweep(), 1);
});

test('an instance whose turn is still running is not evicted even after its request ended', async () => {
  const { pool, clock, evicted } = makePool({ idleTimeout: 10 });
  const gate = deferred();
  const agent = pool.acquire('slow', (id) => new Agent(id, { storage, model: scriptedModel(async () => { await gate.promise; return 'late'; }) }));
  pool.release('slow');
  const turn = agent.chat('hi'); // a turn started outside the router, e.g. by a timer in user code
  assert.equal(agent.busy, true);
  clock.now += 60_000;
  assert.equal(pool.sweep(), 0);
  assert.equal(pool.evict('slow'), false);
  assert.deepEqual(pool.list().map((info) => info.busy), [true]);
  gate.resolve();
  assert.equal(await turn, 'late');
  assert.equal(pool.evict('slow'), true);
  assert.deepEqual(evicted, [['slow', 'manual']]);
});

test('at maxAgents the least recently used idle instance makes room', () => {
  const { pool, evicted, use } = makePool({ maxAgents: 3 });
  use('a');
  use('b');
  use('c');
  use('a'); // a is now the most recent; b the least
  use('d');
  assert.deepEqual(evicted, [['b', 'capacity']]);
  assert.deepEqual(pool.list().map((agent) => agent.id).sort(), ['a', 'c', 'd']);
  pool.acquire('c', (id) => new Counter(id)); // c busy: the next drop skips it
  use('e');
  assert.deepEqual(evicted, [['b', 'capacity'], ['a', 'capacity']]);
  assert.equal(pool.size, 3);
});

test('at maxAgents with every instance busy, acquire throws 429 with Retry-After and creates nothing', () => {
  const { pool, created } = makePool({ maxAgents: 2 });
  pool.acquire('a', (id) => new Counter(id));
  pool.acquire('b', (id) => new Counter(id));
  let factoryCalled = false;
  const error = (() => {
    try {
      pool.acquire('c', (id) => {
        factoryCalled = true;
        return new Counter(id);
      });
    } catch (caught) {
      return caught;
    }
    return undefined;
  })();
  assert.ok(error instanceof AgentRouterError);
  assert.equal(error.status, 429);
  assert.equal(error.code, 'too_many_agents');
  assert.equal(error.headers?.['Retry-After'], '1');
  assert.equal(factoryCalled, false);
  assert.deepEqual(created, ['a', 'b']);
  // A live id is still served at the cap.
  assert.ok(pool.acquire('a', (id) => new Counter(id)));
});

test('at maxAgents a constructor that throws costs no live agent its place; an extra release does not make a busy instance look idle', () => {
  const { pool, evicted, use } = makePool({ maxAgents: 1 });
  use('a');
  assert.throws(() => pool.acquire('b', () => {
    throw new Error('constructor failed');
  }), /constructor failed/);
  assert.deepEqual(evicted, []);
  assert.deepEqual(pool.list().map((agent) => agent.id), ['a']);

  // A constructor that uses the pool itself: the agent to drop for room is chosen after it ran.
  const nested = makePool({ maxAgents: 2 });
  nested.use('a');
  nested.use('b');
  nested.pool.acquire('e', (id) => {
    nested.use('f');
    return new Counter(id);
  });
  assert.deepEqual(nested.evicted, [['a', 'capacity'], ['b', 'capacity']]);
  assert.deepEqual(nested.pool.list().map((agent) => agent.id).sort(), ['e', 'f']);
  assert.equal(nested.pool.size, 2);

  pool.release('a'); // one more than acquired
  pool.acquire('a', (id) => new Counter(id));
  assert.equal(pool.evict('a'), false, 'a is in use');
  assert.throws(() => pool.acquire('b', (id) => new Counter(id)), { status: 429 });
});

test('evict drops an idle instance on purpose and reports what it did', () => {
  const { pool, evicted, use } = makePool();
  const agent = use('x');
  assert.equal(pool.evict('missing'), false);
  assert.equal(pool.evict('x'), true);
  assert.equal(pool.evict('x'), false);
  assert.deepEqual(evicted, [['x', 'manual']]);
  assert.notEqual(use('x'), agent, 'the next use creates a fresh instance');
});

test('list reports id, last activity and busy; clear drops everything with reason close', () => {
  const { pool, clock, evicted, use } = makePool();
  use('idle');
  clock.now += 1_000;
  pool.acquire('busy', (id) => new Counter(id));
  assert.deepEqual(pool.list(), [
    { id: 'idle', lastActivity: new Date(1_000_000).toISOString(), busy: false },
    { id: 'busy', lastActivity: new Date(1_001_000).toISOString(), busy: true },
  ]);
  pool.clear();
  assert.equal(pool.size, 0);
  assert.deepEqual(evicted, [['idle', 'close'], ['busy', 'close']]);
  pool.release('busy'); // a late release of a dropped instance is harmless
  assert.equal(pool.size, 0);
});

test('idleTimeout 0 never evicts; the timer does not start', (t) => {
  mock.timers.enable({ apis: ['setInterval', 'Date'] });
  t.after(() => mock.timers.reset());
  const { pool, clock, use } = makePool({ idleTimeout: 0 });
  use('forever');
  clock.now += 10 * 365 * 86_400_000;
  mock.timers.tick(3_600_000);
  assert.equal(pool.sweep(), 0);
  assert.equal(pool.size, 1);
});

test('a throwing hook is logged and does not break the pool', (t) => {
  const logged = t.mock.method(console, 'error', () => {});
  const pool = new AgentPool({
    onCreate: () => {
      throw new Error('create hook failed');
    },
    onEvict: () => {
      throw new Error('evict hook failed');
    },
  });
  const agent = pool.acquire('h', (id) => new Counter(id));
  pool.release('h');
  assert.equal(pool.peek('h'), agent);
  assert.equal(pool.evict('h'), true);
  assert.equal(logged.mock.callCount(), 2);
});

test('bad options are refused with a TypeError naming them', () => {
  assert.throws(() => new AgentPool({ maxAgents: 0 }), { name: 'TypeError', message: /maxAgents/ });
  assert.throws(() => new AgentPool({ idleTimeout: -1 }), { name: 'TypeError', message: /idleTimeout/ });
  assert.throws(() => new AgentPool({ idleTimeout: Number.NaN }), { name: 'TypeError', message: /idleTimeout/ });
});
