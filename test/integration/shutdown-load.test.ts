import assert from 'node:assert/strict';
import http from 'node:http';
import { test } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import type { Model } from '../../src/models/model.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentServer } from '../../src/server/server.ts';
import { createSSEParser, type SSEEvent } from '../../src/sse/parser.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { deferred } from '../helpers/http.ts';
import { noTurnId } from '../helpers/turns.ts';

const STREAMS = 100;
const CHATS = 100;
/** JSON chats share ids two by two, so half of them wait in an agent's queue when close() comes. */
const CHAT_IDS = CHATS / 2;
/** No request may take longer than this to settle: a hang fails the test with its id, never stalls it. */
const HANG_MS = 15_000;

type Gate = { promise: Promise<void>; resolve: () => void };

interface Outcome {
  id: string;
  status: number;
  /** JSON body, or the SSE events. */
  body: unknown;
  events: SSEEvent[];
}

/**
 * Each agent's model sends "first ", then waits for its agent's gate (or its
 * abort) before "second". Gates of even-numbered agents open right after
 * close() is called, so those turns finish within the drain; odd ones stay
 * shut, so the shutdown deadline aborts them.
 */
function gatedModel(gates: Map<string, Gate>, started: () => void): Model {
  return {
    name: 'gated',
    async *stream({ signal, messages }) {
      const id = String(messages[messages.length - 1]?.content);
      started();
      yield 'first ';
      let gate = gates.get(id);
      if (gate === undefined) gates.set(id, (gate = deferred<void>()));
      await new Promise<void>((resolve, reject) => {
        if (signal.aborted) return reject(signal.reason);
        signal.addEventListener('abort', () => reject(signal.reason), { once: true });
        void gate.promise.then(resolve);
      });
      yield 'second';
    },
  };
}

function request(agent: http.Agent, port: number, id: string, stream: boolean): Promise<Outcome> {
  return new Promise<Outcome>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${id}: no end within ${HANG_MS} ms`)), HANG_MS);
    const req = http.request({ host: '127.0.0.1', port, agent, method: 'POST', path: `/agent/${id}/chat${stream ? '?stream=true' : ''}`, headers: { 'content-type': 'application/json' } });
    req.on('error', (error) => {
      clearTimeout(timer);
      reject(new Error(`${id}: ${error.message}`));
    });
    req.on('response', (res) => {
      const events: SSEEvent[] = [];
      const parser = createSSEParser({ onEvent: (event) => events.push(event) });
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
        if (stream) parser.feed(chunk);
      });
      res.on('error', (error) => reject(new Error(`${id}: ${error.message}`)));
      res.on('end', () => {
        clearTimeout(timer);
        const json = res.headers['content-type']?.startsWith('application/json') === true;
        resolve({ id, status: res.statusCode ?? 0, body: json ? JSON.parse(text) : text, events });
      });
    });
    // The message is the agent id, so the model knows whose gate to wait on.
    req.end(JSON.stringify({ message: id }));
  });
}

test(`close() under load: ${STREAMS} streams and ${CHATS} JSON chats each complete or end with 503 / event: error; no history is half-written`, async (t) => {
  const storage = new MemoryStorage();
  const gates = new Map<string, Gate>();
  let turnsStarted = 0;
  const allStarted = deferred();
  const model = gatedModel(gates, () => {
    if (++turnsStarted === STREAMS + CHAT_IDS) allStarted.resolve();
  });
  const registry = new AgentRegistry();
  registry.register('.*', class Bot extends Agent {
    constructor(id: string) {
      super(id, { model, storage });
    }
  });
  // The drain lets opened gates finish (2 s is ample for 150 short turns even on a busy machine), then aborts the rest.
  const server = new AgentServer(registry, { shutdownTimeout: 2, pingInterval: 0, maxAgents: 1000, logger: { error: () => {} } });
  await server.serve(0);
  t.after(() => server.close());
  let arrived = 0;
  const allArrived = deferred();
  server.httpServer?.prependListener('request', () => {
    if (++arrived === STREAMS + CHATS) allArrived.resolve();
  });
  const agent = new http.Agent({ keepAlive: true, maxSockets: STREAMS + CHATS });
  t.after(() => agent.destroy());

  const streamIds = Array.from({ length: STREAMS }, (_, i) => `stream-${i}`);
  const chatIds = Array.from({ length: CHATS }, (_, i) => `chat-${i % CHAT_IDS}`);
  const outcomes = [...streamIds.map((id) => request(agent, server.port!, id, true)), ...chatIds.map((id) => request(agent, server.port!, id, false))];
  // Every request is in the server, and every turn that can run is running (each chat id runs one and queues one).
  await allArrived.promise;
  await allStarted.promise;

  const closed = server.close();
  for (const [id, gate] of gates) if (isEven(id)) gate.resolve();
  const results = await Promise.all(outcomes);
  await closed;

  const SHUTTING_DOWN = { error: 'Server is shutting down', code: 'shutting_down' };
  const completed = new Map<string, number>();
  const tally = new Map<string, number>();
  const count = (key: string): void => void tally.set(key, (tally.get(key) ?? 0) + 1);
  for (const { id, status, body, events } of results) {
    if (id.startsWith('stream-')) {
      assert.equal(status, 200, id);
      if (events.at(-1)?.event === 'done') {
        assert.ok(isEven(id), `${id}: its gate never opened, yet it completed`);
        assert.deepEqual(events.map((e) => e.data), ['first ', 'second', '[DONE]'], id);
        completed.set(id, (completed.get(id) ?? 0) + 1);
        count('streams done');
      } else {
        assert.deepEqual(events.map((e) => e.event), ['message', 'error'], `${id} ends with one error event after its first chunk`);
        assert.deepEqual(JSON.parse(events[1]?.data ?? ''), SHUTTING_DOWN, id);
        count('streams ended by event: error');
      }
    } else if (status === 200) {
      assert.ok(isEven(id), `${id}: its gate never opened, yet it completed`);
      assert.deepEqual(noTurnId(body), { agent_id: id, response: 'first second' }, id);
      completed.set(id, (completed.get(id) ?? 0) + 1);
      count('chats 200');
    } else {
      assert.deepEqual([status, body], [503, SHUTTING_DOWN], id);
      count('chats 503');
    }
  }
  console.log(`shutdown under load: ${[...tally].map(([k, n]) => `${k}: ${n}`).join(', ')}`);
  for (const kind of ['streams done', 'streams ended by event: error', 'chats 200', 'chats 503']) assert.ok((tally.get(kind) ?? 0) > 0, `no ${kind}: that path went untested`);

  // Storage holds exactly the turns that were answered as complete, each whole: the user message, then the full reply.
  for (const id of new Set([...streamIds, ...chatIds])) {
    const messages = (await storage.load(id))?.messages ?? [];
    assert.equal(messages.length, 2 * (completed.get(id) ?? 0), `${id}: stored turns match completed answers`);
    for (let i = 0; i < messages.length; i += 2) {
      assert.deepEqual(messages[i], { role: 'user', content: id });
      assert.deepEqual(messages[i + 1], { role: 'assistant', content: 'first second' });
    }
  }
  assert.equal(server.pool.size, 0, 'close() dropped every live agent');
});

function isEven(id: string): boolean {
  return Number(id.split('-')[1]) % 2 === 0;
}
