// Clients at random against one agent's turns, through one router or two sharing a storage (as two
// processes would): chat streams cut or left, JSON chats, cancels, rejoins, whenBusy. What must hold
// whatever the interleaving: each stream's ids in order and one end, a rejoin agreeing with the
// stream it rejoins, and storage holding exactly the turns that completed, each once, in pairs.
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent } from '../../src/agent/agent.ts';
import type { Model } from '../../src/models/model.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { readSSE, type SSEEvent } from '../../src/sse/parser.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import type { Storage } from '../../src/storage/storage.ts';
import { listen } from '../helpers/listen.ts';
import { postgresBackend, redisBackend, type StorageBackend } from '../helpers/storage-backends.ts';

const SECONDS = Number(process.env['STRESS_SECONDS'] ?? 5);
const CLIENTS = 12;
/** Streams the run starts at least: past SECONDS it goes on until it has (a slow machine), for up to a minute more. */
const MIN_STREAMS = 20;
const AGENTS = ['a1', 'a2', 'a3'];
const ENDS = new Set(['done', 'turn.finished', 'error', 'turn.failed']);
const seed = process.env['STRESS_SEED'] !== undefined ? Number(process.env['STRESS_SEED']) : Math.floor(Math.random() * 2 ** 31);
console.log(`turns stress seed ${seed}; replay with STRESS_SEED=${seed} node scripts/test.mjs --tsx test/integration/turns-stress.test.ts`);

/** A seeded generator (mulberry32): the same seed, the same choices (the interleaving still varies with timing). */
function random(start: number): { next: () => number; pick: <T>(items: readonly T[]) => T } {
  let state = start >>> 0;
  const next = (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = Math.imul(state ^ (state >>> 15), state | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
  return { next, pick: (items) => items[Math.floor(next() * items.length)] as (typeof items)[number] };
}

interface Streamed {
  agent: string;
  message: string;
  typed: boolean;
  events: SSEEvent[];
  /** Its client read it to `done` or `turn.finished`. */
  completed: boolean;
  /** Its client left before the end. */
  cut: boolean;
}

async function stress(t: TestContext, storages: Storage[]): Promise<void> {
  const rng = random(seed);
  // Words a few milliseconds apart: turns overlap, and cancels and rejoins land mid-turn.
  const model: Model = {
    name: 'words',
    async *stream({ messages, signal }) {
      for (const [i, word] of String(messages.at(-1)?.content).split(' ').entries()) {
        await sleep(Math.floor(rng.next() * 12), undefined, { signal });
        yield i === 0 ? word : ` ${word}`;
      }
    },
  };
  const urls: string[] = [];
  for (const storage of storages) {
    class Bot extends Agent {
      constructor(id: string) {
        super(id, { model, storage });
      }
    }
    const registry = new AgentRegistry();
    registry.register('a[0-9]', Bot);
    const { url, close } = await listen(new AgentRouter(registry, { logger: { error: () => {} }, turnTimeout: 10 }).toRequestListener());
    t.after(close);
    urls.push(url);
  }
  const problems: string[] = [];
  const streams = new Map<string, Streamed>();
  const completed = new Map<string, Set<string>>(AGENTS.map((agent) => [agent, new Set()]));
  let made = 0;

  const inOrder = (events: SSEEvent[], turnId: string, from: number, what: string): void => {
    events.forEach((event, i) => {
      if (event.id !== `${turnId}:${from + i}`) problems.push(`${what}: event ${i} has id ${event.id}, not ${turnId}:${from + i}`);
    });
    const ends = events.filter((event) => ENDS.has(event.event)).length;
    if (ends !== 1 || !ENDS.has(events.at(-1)?.event ?? '')) problems.push(`${what}: ${ends} ends, last ${JSON.stringify(events.at(-1))}`);
  };

  const chatStream = async (url: string, agent: string): Promise<void> => {
    const typed = rng.next() < 0.5;
    const message = `s${++made} one two three four`;
    const query = `?stream=${typed ? 'events' : 'true'}${rng.next() < 0.3 ? '&on_disconnect=continue' : ''}${rng.next() < 0.2 ? `&when_busy=${rng.pick(['reject', 'interrupt'])}` : ''}`;
    const cutAfter = rng.next() < 0.3 ? 1 + Math.floor(rng.next() * 3) : Infinity;
    const abort = new AbortController();
    const res = await fetch(`${url}/${agent}/chat${query}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ message }), signal: abort.signal });
    if (res.status !== 200) {
      const body = (await res.json()) as { code: string };
      if (!(res.status === 409 && body.code === 'agent_busy')) problems.push(`a stream answered ${res.status} ${body.code}`);
      return;
    }
    const turnId = res.headers.get('turn-id') as string;
    const stream: Streamed = { agent, message, typed, events: [], completed: false, cut: cutAfter !== Infinity };
    streams.set(turnId, stream);
    try {
      for await (const event of readSSE(res.body as ReadableStream<Uint8Array>)) {
        stream.events.push(event);
        // Leaving the loop cancels the body: an abort alone can leave a read pending for good (undici #4089, Node 20).
        if (stream.events.length === cutAfter) {
          abort.abort();
          break;
        }
      }
    } catch {
      // The client cut it.
    }
    if (cutAfter !== Infinity) return;
    inOrder(stream.events, turnId, 1, `stream ${turnId}`);
    stream.completed = ['done', 'turn.finished'].includes(stream.events.at(-1)?.event ?? '');
    if (stream.completed) completed.get(agent)?.add(message);
  };

  const chatJson = async (url: string, agent: string): Promise<void> => {
    const message = `j${++made} five six`;
    const res = await fetch(`${url}/${agent}/chat${rng.next() < 0.2 ? `?when_busy=${rng.pick(['reject', 'interrupt'])}` : ''}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ message }),
    });
    const body = (await res.json()) as { response?: string; code?: string };
    if (res.status === 200 && body.response === message) completed.get(agent)?.add(message);
    else if (!(res.status === 409 && (body.code === 'cancelled' || body.code === 'agent_busy'))) problems.push(`a JSON chat answered ${res.status} ${JSON.stringify(body)}`);
  };

  const cancel = async (url: string, agent: string): Promise<void> => {
    const ids = [...streams].filter(([, stream]) => stream.agent === agent).map(([id]) => id);
    const body = ids.length === 0 || rng.next() < 0.5 ? {} : { turn_id: rng.pick(ids) };
    const res = await fetch(`${url}/${agent}/cancel`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const reply = (await res.json()) as { code?: string };
    if (!(res.status === 202 || (res.status === 404 && reply.code === 'no_running_turn'))) problems.push(`a cancel answered ${res.status} ${JSON.stringify(reply)}`);
  };

  const rejoin = async (url: string, agent: string): Promise<void> => {
    const known = [...streams].filter(([, stream]) => stream.agent === agent && stream.events.length > 0);
    if (known.length === 0) return;
    const [turnId, stream] = rng.pick(known);
    const had = Math.floor(rng.next() * (stream.events.length + 1));
    const headers: Record<string, string> = had === 0 ? {} : { 'last-event-id': stream.events[had - 1]?.id as string };
    const res = await fetch(`${url}/${agent}/turns/${turnId}/events${stream.typed ? '?stream=events' : ''}`, { headers });
    if (res.status === 204) {
      if (!ENDS.has(stream.events[had - 1]?.event ?? '')) problems.push(`rejoin ${turnId} after ${had}: 204 before the end`);
      return;
    }
    if (res.status !== 200) return void problems.push(`rejoin ${turnId} answered ${res.status} ${((await res.json()) as { code: string }).code}`);
    const events: SSEEvent[] = [];
    for await (const event of readSSE(res.body as ReadableStream<Uint8Array>)) events.push(event);
    inOrder(events, turnId, had + 1, `rejoin ${turnId} after ${had}`);
    for (const event of events) {
      const live = stream.events.find((e) => e.id === event.id);
      if (live !== undefined && (live.event !== event.event || live.data !== event.data)) problems.push(`rejoin ${turnId}: ${event.id} is ${JSON.stringify(event)}, live ${JSON.stringify(live)}`);
    }
  };

  const deadline = Date.now() + SECONDS * 1000;
  const operations = [chatStream, chatStream, chatStream, chatJson, cancel, rejoin, rejoin];
  const more = (): boolean => Date.now() < deadline || (streams.size < MIN_STREAMS && Date.now() < deadline + 60_000);
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      while (more()) await rng.pick(operations)(rng.pick(urls), rng.pick(AGENTS));
    }),
  );
  // Storage holds each completed turn, once, as a user message and its echo; anything else stored is a
  // turn whose client left (onDisconnect continue, or a cut that came while it was storing its result).
  for (const agent of AGENTS) {
    const messages = (await (storages[0] as Storage).load(agent))?.messages ?? [];
    const asked = messages.filter((m) => m.role === 'user').map((m) => m.content);
    assert.deepEqual(messages.filter((m) => m.role === 'assistant').map((m) => m.content), asked, `${agent}: each reply follows its message`);
    assert.equal(new Set(asked).size, asked.length, `${agent}: a turn stored twice`);
    for (const message of completed.get(agent) ?? []) if (!asked.includes(message)) problems.push(`${agent}: ${message} completed but was not stored`);
    for (const message of asked) {
      const left = [...streams.values()].some((stream) => stream.message === message && stream.cut);
      if (!completed.get(agent)?.has(message) && !left) problems.push(`${agent}: ${message} stored, but no client saw it complete or left it`);
    }
  }
  assert.ok(streams.size >= MIN_STREAMS, `only ${streams.size} streams in ${SECONDS} s and a minute more`);
  assert.deepEqual(problems.slice(0, 10), [], `seed ${seed}`);
}

test(`turns under random concurrent clients, one router, MemoryStorage (seed ${seed})`, (t) => stress(t, [new MemoryStorage()]));

for (const backend of [redisBackend('node-redis', { shareTurns: true }), postgresBackend({ shareTurns: true })] as StorageBackend[]) {
  test(`turns under random concurrent clients, two routers sharing ${backend.name} with shareTurns (seed ${seed})`, async (t) => {
    const storages = [await backend.open(), await backend.open()];
    t.after(async () => {
      for (const storage of storages) await storage.close?.();
      await backend.cleanup();
    });
    await stress(t, storages);
  });
}
