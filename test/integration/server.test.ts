import assert from 'node:assert/strict';
import http from 'node:http';
import http2 from 'node:http2';
import net from 'node:net';
import { mock, test } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { echoModel } from '../../src/models/echo.ts';
import { scriptedModel } from '../../src/models/scripted.ts';
import type { Model } from '../../src/models/model.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import type { AgentServerConfig } from '../../src/server/config.ts';
import { isLoopback } from '../../src/server/allowed-hosts.ts';
import { AgentServer } from '../../src/server/server.ts';
import { readSSE, type SSEEvent } from '../../src/sse/parser.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import type { Storage } from '../../src/storage/storage.ts';
import { deferred, getJson, postJson, streamChat } from '../helpers/http.ts';
import { collectSSE } from '../helpers/sse.ts';
import { counterOn } from '../helpers/agents.ts';
import { noTurnId } from '../helpers/turns.ts';

const quiet = { error: () => {} };

/**
 * A model that sends "first ", then waits until `gate` opens (or its turn is
 * aborted) before sending "second": holds a turn open mid-stream.
 */
function gatedModel(gate: Promise<void>, onStart: (agentId: string) => void, agentId: string): Model {
  return {
    name: 'gated',
    async *stream({ signal }) {
      onStart(agentId);
      yield 'first ';
      await new Promise<void>((resolve, reject) => {
        const onAbort = (): void => reject(signal.reason);
        if (signal.aborted) return onAbort();
        signal.addEventListener('abort', onAbort, { once: true });
        void gate.then(resolve);
      });
      yield 'second';
    },
  };
}

/** A registry of counters and gated agents over one shared storage. */
function makeRegistry(gate: Promise<void> = new Promise(() => {}), onStart: (agentId: string) => void = () => {}) {
  const storage = new MemoryStorage();
  const Counter = counterOn(storage);
  class Gated extends Agent {
    constructor(id: string) {
      super(id, { model: gatedModel(gate, onStart, id), storage });
    }
  }
  const registry = new AgentRegistry();
  registry.register('counter-[0-9]+', Counter);
  registry.register('gated-[0-9]+', Gated);
  return { registry, storage };
}

async function start(
  t: { after: (fn: () => Promise<void>) => void },
  config: AgentServerConfig = {},
  gate?: Promise<void>,
  onStart?: (agentId: string) => void,
) {
  const { registry, storage } = makeRegistry(gate, onStart);
  const server = new AgentServer(registry, { logger: quiet, ...config });
  await server.serve(0);
  t.after(() => server.close());
  return { server, storage, url: server.url as string };
}

/** Opens a stream and waits for its first event, so the turn is known to be running. */
async function openStream(url: string): Promise<{ first: SSEEvent; rest: () => Promise<SSEEvent[]> }> {
  const res = await streamChat(url, 'hello');
  assert.equal(res.status, 200);
  const events = readSSE(res.body as ReadableStream<Uint8Array>);
  const first = await events.next();
  assert.equal(first.done, false);
  return {
    first: first.value as SSEEvent,
    rest: async () => {
      const seen: SSEEvent[] = [];
      for await (const event of events) seen.push(event);
      return seen;
    },
  };
}

test('serve(0) binds a free port; chat, stream, invoke and state under /agent/{id}', async (t) => {
  const { server, url } = await start(t);
  assert.equal(typeof server.port, 'number');
  assert.equal(url, `http://127.0.0.1:${server.port}`);

  assert.deepEqual(noTurnId((await postJson(`${url}/agent/counter-1/chat`, { message: 'hello there' })).body), { agent_id: 'counter-1', response: 'hello there' });
  const res = await streamChat(`${url}/agent/counter-1/chat`, 'streamed words here');
  assert.equal(res.headers.get('content-type'), 'text/event-stream');
  const { text, events } = await collectSSE(res);
  assert.equal(text, 'streamed words here');
  assert.equal(events.at(-1)?.event, 'done');
  assert.deepEqual(noTurnId((await postJson(`${url}/agent/counter-1/invoke`, { method: 'increment', params: { by: 3 } })).body), { agent_id: 'counter-1', result: 3 });
  assert.deepEqual((await getJson(`${url}/agent/counter-1/state`)).body, { agent_id: 'counter-1', state: { count: 3 } });
  assert.deepEqual((await postJson(`${url}/agent/counter-1`, { action: 'state' })).body, { agent_id: 'counter-1', state: { count: 3 } });
  assert.equal((await postJson(`${url}/agent/nobody/chat`, { message: 'x' })).body.code, 'agent_not_found');
});

test('serve(0, "[::1]") takes an IPv6 address as a URL writes it (and as url prints it)', async (t) => {
  const server = new AgentServer(new Agent('solo', { model: echoModel() }));
  t.after(() => server.close());
  await server.serve(0, '[::1]');
  assert.equal(server.url, `http://[::1]:${server.port}`);
  assert.deepEqual(noTurnId((await postJson(`${server.url}/agent/solo/chat`, { message: 'over ipv6' })).body), { agent_id: 'solo', response: 'over ipv6' });
});

test('GET /healthz answers ok; other methods get 405 with Allow', async (t) => {
  const { url } = await start(t);
  const health = await getJson(`${url}/healthz`);
  assert.equal(health.status, 200);
  assert.deepEqual(health.body, { status: 'ok' });
  const head = await fetch(`${url}/healthz`, { method: 'HEAD' });
  assert.equal(head.status, 200);
  const post = await postJson(`${url}/healthz`, {});
  assert.equal(post.status, 405);
  assert.equal(post.headers.get('allow'), 'GET, HEAD');
});

test('unknown paths get 404 JSON with code not_found', async (t) => {
  const { url } = await start(t);
  for (const path of ['/', '/nope', '/agent', '/agent/counter-1/unknown', '/agentsx', '/healthz/deep']) {
    const reply = await getJson(`${url}${path}`);
    assert.equal(reply.status, 404, path);
    assert.equal(reply.body.code, 'not_found', path);
    assert.equal(typeof reply.body.error, 'string');
  }
});

test('GET /agents is 404 unless enableListAgents', async (t) => {
  const { url } = await start(t);
  await postJson(`${url}/agent/counter-1/chat`, { message: 'hi' });
  const reply = await getJson(`${url}/agents`);
  assert.equal(reply.status, 404);
  assert.equal(reply.body.code, 'not_found');
});

test('GET /agents lists live agents with last activity and busy', async (t) => {
  const gate = deferred();
  const clock = { now: Date.parse('2030-01-01T00:00:00.000Z') };
  const { url } = await start(t, { enableListAgents: true, now: () => clock.now }, gate.promise);
  assert.deepEqual((await getJson(`${url}/agents`)).body, { agents: [] });
  await postJson(`${url}/agent/counter-1/chat`, { message: 'hi' });
  clock.now += 1000;
  const stream = await openStream(`${url}/agent/gated-1/chat`);
  assert.deepEqual((await getJson(`${url}/agents`)).body, {
    agents: [
      { id: 'counter-1', last_activity: '2030-01-01T00:00:00.000Z', busy: false },
      { id: 'gated-1', last_activity: '2030-01-01T00:00:01.000Z', busy: true },
    ],
  });
  gate.resolve();
  assert.equal((await stream.rest()).at(-1)?.event, 'done');
  assert.equal((await postJson(`${url}/agents`, {})).status, 405);
});

test('with cors, a page on an allowed origin can read /healthz, /agents and a 404 too, and their preflights are answered', async (t) => {
  const origin = 'https://app.example';
  const { url } = await start(t, { enableListAgents: true, cors: { origins: [origin] } });
  for (const path of ['/healthz', '/agents', '/nowhere']) {
    const reply = await fetch(`${url}${path}`, { headers: { origin } });
    assert.equal(reply.headers.get('access-control-allow-origin'), origin, path);
    assert.equal(reply.status, path === '/nowhere' ? 404 : 200, path);
    const preflight = await fetch(`${url}${path}`, { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'GET' } });
    assert.equal(preflight.status, 204, path);
    assert.equal(preflight.headers.get('access-control-allow-origin'), origin, path);
  }
  // Another origin still gets no CORS headers.
  assert.equal((await fetch(`${url}/healthz`, { headers: { origin: 'https://elsewhere.example' } })).headers.get('access-control-allow-origin'), null);
});

test('GET /agents asks authorize with {agentId: "*", action: "list"}; a refused caller gets 403', async (t) => {
  const asked: unknown[] = [];
  const { url } = await start(t, {
    enableListAgents: true,
    authorize: (req, context) => {
      asked.push(context);
      return req.headers['x-admin'] === 'yes' || context.agentId !== '*';
    },
  });
  await postJson(`${url}/agent/counter-1/chat`, { message: 'hi' });
  const refused = await getJson(`${url}/agents`);
  assert.deepEqual([refused.status, refused.body], [403, { error: 'Forbidden', code: 'forbidden' }]);
  const allowed = await getJson(`${url}/agents`, { 'x-admin': 'yes' });
  assert.deepEqual(allowed.body.agents.map((agent: { id: string }) => agent.id), ['counter-1']);
  assert.deepEqual(asked.at(-1), { agentId: '*', action: 'list' });
});

test('an idle agent is evicted by the sweep timer and comes back with its state', async (t) => {
  mock.timers.enable({ apis: ['setInterval'] });
  t.after(() => mock.timers.reset());
  const clock = { now: 0 };
  const created: string[] = [];
  const evicted: string[] = [];
  const { server, url } = await start(t, {
    idleTimeout: 60,
    now: () => clock.now,
    pingInterval: 0,
    onCreate: (agent) => created.push(agent.id),
    onEvict: (agent, reason) => evicted.push(`${agent.id}:${reason}`),
  });
  assert.equal((await postJson(`${url}/agent/counter-7/invoke`, { method: 'increment', params: { by: 4 } })).body.result, 4);
  const first = server.pool.peek('counter-7');
  assert.ok(first);

  clock.now += 61_000;
  mock.timers.tick(60_000); // the sweep runs on its interval
  assert.equal(server.pool.peek('counter-7'), undefined);
  assert.deepEqual(evicted, ['counter-7:idle']);

  assert.deepEqual((await getJson(`${url}/agent/counter-7/state`)).body.state, { count: 4 });
  assert.equal((await postJson(`${url}/agent/counter-7/invoke`, { method: 'increment' })).body.result, 5);
  assert.notEqual(server.pool.peek('counter-7'), first);
  assert.deepEqual(created, ['counter-7', 'counter-7']);
});

test('server.evict drops an idle agent on purpose; its state is kept', async (t) => {
  const { server, url } = await start(t);
  await postJson(`${url}/agent/counter-2/invoke`, { method: 'increment', params: { by: 2 } });
  assert.equal(server.evict('counter-2'), true);
  assert.equal(server.evict('counter-2'), false);
  assert.deepEqual((await getJson(`${url}/agent/counter-2/state`)).body.state, { count: 2 });
});

test('lifecycle hooks that throw or reject are reported to the logger; the server keeps serving', async (t) => {
  const logged: string[] = [];
  const { server, url } = await start(t, {
    logger: { error: (message) => logged.push(message) },
    onCreate: async () => {
      throw new Error('onCreate rejected');
    },
    onEvict: () => {
      throw new Error('onEvict threw');
    },
  });
  assert.equal((await postJson(`${url}/agent/counter-3/invoke`, { method: 'increment' })).body.result, 1);
  assert.equal(server.evict('counter-3'), true);
  await new Promise((resolve) => setImmediate(resolve)); // the rejection is reported a tick later
  assert.deepEqual(logged, [
    'AgentPool: a lifecycle hook failed for agent "counter-3"',
    'AgentPool: a lifecycle hook failed for agent "counter-3"',
  ]);
  assert.equal((await postJson(`${url}/agent/counter-3/invoke`, { method: 'increment' })).body.result, 2);
});

test('at maxAgents the least recently used idle agent is dropped', async (t) => {
  const evicted: string[] = [];
  const { server, url } = await start(t, { maxAgents: 2, onEvict: (agent, reason) => evicted.push(`${agent.id}:${reason}`) });
  await postJson(`${url}/agent/counter-1/invoke`, { method: 'increment' });
  await postJson(`${url}/agent/counter-2/invoke`, { method: 'increment' });
  await getJson(`${url}/agent/counter-1/state`); // counter-2 is now the least recently used
  await postJson(`${url}/agent/counter-3/invoke`, { method: 'increment' });
  assert.deepEqual(evicted, ['counter-2:capacity']);
  assert.deepEqual(server.pool.list().map((agent) => agent.id).sort(), ['counter-1', 'counter-3']);
  assert.deepEqual((await getJson(`${url}/agent/counter-2/state`)).body.state, { count: 1 }, 'state survived the drop');
});

test('429 with Retry-After when every live agent is mid-turn', async (t) => {
  const gate = deferred();
  const secondStarted = deferred();
  const { url } = await start(t, { maxAgents: 2 }, gate.promise, (id) => {
    if (id === 'gated-2') secondStarted.resolve();
  });
  const a = await openStream(`${url}/agent/gated-1/chat`);
  const b = postJson(`${url}/agent/gated-2/chat`, { message: 'hold' }); // a non-streamed turn, also held
  await secondStarted.promise;
  const refused = await postJson(`${url}/agent/counter-9/chat`, { message: 'x' });
  assert.equal(refused.status, 429);
  assert.equal(refused.headers.get('retry-after'), '1');
  assert.equal(refused.body.code, 'too_many_agents');
  assert.equal((await getJson(`${url}/agent/gated-1/state`)).status, 200, 'a live agent is still served at the cap');
  gate.resolve();
  assert.equal((await a.rest()).at(-1)?.event, 'done');
  assert.deepEqual(noTurnId((await b).body), { agent_id: 'gated-2', response: 'first second' });
  assert.equal((await postJson(`${url}/agent/counter-9/chat`, { message: 'x' })).status, 200, 'room again once they finish');
});

test('close() lets an open stream finish before its deadline; new requests on its connection get 503', async (t) => {
  const gate = deferred();
  const { server, storage, url } = await start(t, { shutdownTimeout: 60 }, gate.promise);
  const { port } = server as { port: number };

  // One keep-alive connection: a streamed turn, then (pipelined during the drain) a second request.
  const socket = net.connect(port, '127.0.0.1');
  t.after(() => socket.destroy());
  let raw = '';
  const sawFirst = deferred();
  const ended = deferred();
  socket.setEncoding('utf8');
  socket.on('data', (text: string) => {
    raw += text;
    if (raw.includes('data: first')) sawFirst.resolve();
  });
  socket.on('close', () => ended.resolve());
  const body = JSON.stringify({ message: 'hello' });
  socket.write(`POST /agent/gated-1/chat?stream=true HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  await sawFirst.promise;

  const closed = server.close();
  assert.equal(server.close(), closed, 'close is idempotent');
  assert.equal(server.closing, true);
  socket.write('GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n');
  await assert.rejects(fetch(`${url}/healthz`), 'no new connection is accepted');

  gate.resolve();
  await closed;
  await ended.promise;
  const [stream, refused] = raw.split(/(?=HTTP\/1\.1 503)/);
  assert.match(stream as string, /data: second/);
  assert.match(stream as string, /event: done/);
  assert.match(refused as string, /^HTTP\/1\.1 503/);
  assert.match(refused as string, /connection: close/i);
  assert.match(refused as string, /\{"error":"Server is shutting down","code":"shutting_down"\}/);
  const record = await storage.load('gated-1');
  assert.deepEqual(record?.messages.map((m) => m.content), ['hello', 'first second'], 'the whole turn was committed');
  assert.equal(server.pool.size, 0);
});

test('with drainDelay, close() first serves as usual, new connections included, while /healthz answers 503', async (t) => {
  const { server, url } = await start(t, { drainDelay: 0.3 });
  const closed = server.close();
  const health = await fetch(`${url}/healthz`);
  assert.equal(health.status, 503);
  assert.deepEqual(await health.json(), { error: 'Server is shutting down', code: 'shutting_down' });
  assert.equal((await postJson(`${url}/agent/counter-4/invoke`, { method: 'increment' })).body.result, 1, 'a new connection is still served');
  await closed;
  await assert.rejects(fetch(`${url}/healthz`), 'then the listener is closed');
});

test('close() past its deadline ends open streams with event: error, held requests with 503, and commits no half turn', async (t) => {
  const started = deferred();
  const { server, storage, url } = await start(t, { shutdownTimeout: 0 }, undefined, (id) => {
    if (id === 'gated-3') started.resolve();
  });
  const a = await openStream(`${url}/agent/gated-1/chat`);
  const b = await openStream(`${url}/agent/gated-2/chat`);
  const held = postJson(`${url}/agent/gated-3/chat`, { message: 'not streamed' });
  await started.promise;
  assert.equal(a.first.data, 'first ');
  await server.close();
  for (const stream of [a, b]) {
    const rest = await stream.rest();
    assert.deepEqual(rest.map((event) => event.event), ['error']);
    assert.deepEqual(JSON.parse((rest[0] as SSEEvent).data), { error: 'Server is shutting down', code: 'shutting_down' });
  }
  const reply = await held;
  assert.equal(reply.status, 503);
  assert.deepEqual(reply.body, { error: 'Server is shutting down', code: 'shutting_down' });
  assert.equal(reply.headers.get('connection'), 'close');
  for (const id of ['gated-1', 'gated-2', 'gated-3']) assert.equal(await storage.load(id), undefined, `${id}: the aborted turn left no trace`);
  assert.equal(server.httpServer?.listening, false);
});

test('close() does not wait for a request pipelined behind a stream whose client has gone', async (t) => {
  const started = deferred();
  const { server } = await start(t, { shutdownTimeout: 30 }, undefined, () => started.resolve());
  const body = JSON.stringify({ message: 'hello' });
  const socket = net.connect(server.port as number, '127.0.0.1');
  t.after(() => socket.destroy());
  socket.on('error', () => {});
  // A stream held open, and a request behind it on the same connection, whose answer waits its turn to be sent.
  socket.write(
    `POST /agent/gated-1/chat?stream=true HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}` +
      'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n',
  );
  await started.promise;
  socket.destroy();
  await new Promise((resolve) => setTimeout(resolve, 100));
  // Node gave the queued response no 'close' when the connection went, so close() waited out shutdownTimeout for it.
  const closed = await Promise.race([server.close().then(() => true), new Promise((resolve) => setTimeout(resolve, 5000, false))]);
  assert.equal(closed, true, 'close() still waiting 5 s later, with no client left');
});

test('close() past its deadline: a request still in its authorize hook then gets 503, and its turn never starts', async (t) => {
  const authorized = deferred();
  const release = deferred();
  const started: string[] = [];
  const authorize = async (_req: unknown, { agentId }: { agentId: string }) => {
    if (agentId !== 'gated-2') return true;
    authorized.resolve();
    await release.promise;
    return true;
  };
  const { server, url } = await start(t, { shutdownTimeout: 0, authorize }, undefined, (id) => started.push(id));
  const open = await openStream(`${url}/agent/gated-1/chat`);
  const late = postJson(`${url}/agent/gated-2/chat`, { message: 'authorized after the deadline' });
  await authorized.promise;
  const closing = server.close();
  // The open stream's event: error marks the deadline's abort; only then does the hook let the request through.
  assert.deepEqual((await open.rest()).map((event) => event.event), ['error']);
  release.resolve();
  const reply = await late;
  assert.deepEqual([reply.status, reply.body], [503, { error: 'Server is shutting down', code: 'shutting_down' }]);
  await closing;
  assert.deepEqual(started, ['gated-1']);
});

test('a listener mounted on your own server answers 503 once close() began', async (t) => {
  const { registry } = makeRegistry();
  const server = new AgentServer(registry, { logger: quiet });
  const { listen } = await import('../helpers/listen.ts');
  const own = await listen(server.listener);
  t.after(own.close);
  assert.equal((await getJson(`${own.url}/healthz`)).status, 200);
  await server.close(); // never served: resolves at once
  const reply = await getJson(`${own.url}/healthz`);
  assert.equal(reply.status, 503);
  assert.deepEqual(reply.body, { error: 'Server is shutting down', code: 'shutting_down' });
  await assert.rejects(server.serve(0), /was closed/);
});

test('with cors, a page reads the 503 of a server shutting down, and its preflight is answered', async (t) => {
  // The listener on a server of your own (or an HTTP/2 one, where a page's requests share one
  // connection) keeps answering after close() began: without CORS headers a page saw only a
  // network error (fetch's TypeError), never the 503 that tells it to retry.
  const origin = 'https://app.example';
  const { registry } = makeRegistry();
  const logged: unknown[] = [];
  const origins = (sent: string): boolean => {
    if (sent === 'https://boom.example') throw new Error('predicate bug');
    return sent === origin;
  };
  const server = new AgentServer(registry, { logger: { error: (_message, error) => void logged.push(error) }, cors: { origins } });
  const { listen } = await import('../helpers/listen.ts');
  const own = await listen(server.listener);
  t.after(own.close);
  await server.close();
  const preflight = await fetch(`${own.url}/agent/counter-1/chat`, { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'POST' } });
  assert.equal(preflight.status, 204);
  assert.equal(preflight.headers.get('access-control-allow-origin'), origin);
  const reply = await fetch(`${own.url}/agent/counter-1/chat`, { method: 'POST', headers: { origin, 'content-type': 'application/json' }, body: '{"message":"hi"}' });
  assert.equal(reply.status, 503);
  assert.equal(reply.headers.get('access-control-allow-origin'), origin);
  assert.deepEqual(await reply.json(), { error: 'Server is shutting down', code: 'shutting_down' });
  const other = await fetch(`${own.url}/healthz`, { headers: { origin: 'https://elsewhere.example' } });
  assert.equal(other.status, 503);
  assert.equal(other.headers.get('access-control-allow-origin'), null);
  await other.body?.cancel();
  // An origin predicate that throws: still the 503, without CORS headers, and the bug is logged.
  const boom = await fetch(`${own.url}/healthz`, { headers: { origin: 'https://boom.example' } });
  assert.deepEqual([boom.status, boom.headers.get('access-control-allow-origin')], [503, null]);
  await boom.body?.cancel();
  assert.deepEqual(logged.map((error) => (error as Error).message), ['predicate bug']);
});

test('requestTimeout limits slow uploads but never cuts a long stream', async (t) => {
  const gate = deferred();
  const { server, url } = await start(t, { keepAliveTimeout: 0.1, headersTimeout: 0.2, requestTimeout: 0.3 }, gate.promise);
  const stream = await openStream(`${url}/agent/gated-1/chat`);

  // A later request that never finishes its body: Node answers it 408 once requestTimeout passes.
  const slow = net.connect(server.port as number, '127.0.0.1');
  t.after(() => slow.destroy());
  let slowReply = '';
  slow.setEncoding('utf8');
  slow.on('data', (text: string) => {
    slowReply += text;
  });
  const slowClosed = new Promise((resolve) => slow.on('close', resolve));
  slow.write('POST /agent/counter-1/chat HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"mess');
  await slowClosed;
  assert.match(slowReply, /^HTTP\/1\.1 408/);

  // The stream began earlier than the slow upload, so it has outlived requestTimeout too; it is still open.
  gate.resolve();
  const rest = await stream.rest();
  assert.deepEqual(rest.map((event) => event.data), ['second', '[DONE]']);
});

test('serving one Agent: it answers at /agent/{its id}', async (t) => {
  const agent = new Agent('support bot+1', { model: echoModel(), storage: new MemoryStorage() });
  const server = new AgentServer(agent, { logger: quiet });
  await server.serve(0);
  t.after(() => server.close());
  const reply = await postJson(`${server.url}/agent/${encodeURIComponent(agent.id)}/chat`, { message: 'hi you' });
  assert.deepEqual(noTurnId(reply.body), { agent_id: 'support bot+1', response: 'hi you' });
  assert.equal(server.pool.peek(agent.id), agent, 'the very instance is served');
  assert.equal((await postJson(`${server.url}/agent/support%20bottt1/chat`, { message: 'x' })).status, 404, 'the id is matched literally');
});

test('serve rejects a port in use with a clear error; serving twice is refused', async (t) => {
  const { server } = await start(t);
  const second = new AgentServer(makeRegistry().registry, { logger: quiet });
  t.after(() => second.close());
  await assert.rejects(second.serve(server.port, '127.0.0.1'), (error: Error & { code?: string }) => {
    assert.equal(error.code, 'EADDRINUSE');
    assert.match(error.message, new RegExp(`AgentServer.serve: 127.0.0.1:${server.port} is already in use`));
    return true;
  });
  await assert.rejects(server.serve(0), /already serving/);
  await assert.rejects(second.serve(70_000), { name: 'TypeError', message: /port must be an integer/ });
  assert.throws(() => new AgentServer({} as AgentRegistry), { name: 'TypeError', message: /AgentRegistry or an Agent/ });
});

test('a single Agent whose id no URL can name is refused at construction, not served as 400s; a long id fits a raised maxIdLength', async (t) => {
  for (const id of ['x'.repeat(300), 'a/b', 'tab\there', '..']) {
    assert.throws(() => new AgentServer(new Agent(id, { model: echoModel() })), { name: 'TypeError', message: /the agent's id cannot be named in a URL.*new AgentRouter\(agent\)/ }, id);
  }
  const server = new AgentServer(new Agent('x'.repeat(300), { model: echoModel(), storage: new MemoryStorage() }), { maxIdLength: 300, logger: quiet });
  t.after(() => server.close());
  await server.serve(0, '127.0.0.1');
  const reply = await postJson(`${server.url}/agent/${'x'.repeat(300)}/chat`, { message: 'hi' });
  assert.deepEqual([reply.status, reply.body.response], [200, 'hi']);
});

test('serve(process.env.PORT), a string, is refused saying it is one: "got 8080" would read as a valid port refused', async (t) => {
  const server = new AgentServer(makeRegistry().registry, { logger: quiet });
  t.after(() => server.close());
  await assert.rejects(server.serve('8080' as unknown as number), {
    name: 'TypeError',
    message: 'AgentServer.serve: port must be an integer from 0 to 65535, got "8080"; convert a string first, e.g. serve(Number(process.env.PORT ?? 8080))',
  });
  await assert.rejects(server.serve(1.5), { message: 'AgentServer.serve: port must be an integer from 0 to 65535, got 1.5' });
  await server.serve(0);
  assert.equal((await getJson(`${server.url}/healthz`)).status, 200, 'a refused call leaves the server free to serve');
});

test('serve twice at once is refused; close() during serve() waits for it, then closes', async () => {
  const server = new AgentServer(makeRegistry().registry, { logger: quiet });
  const starting = server.serve(0);
  await assert.rejects(server.serve(0), /already serving/);
  const closed = server.close();
  await starting;
  await closed;
  assert.equal(server.httpServer?.listening, false);
  await assert.rejects(fetch(`${server.url}/healthz`));
});

/** GET `path` from the server at `url` with the Host header given (fetch does not let a caller set it). */
function getWithHost(url: string, path: string, host: string | undefined): Promise<{ status: number; body: any }> {
  const { port } = new URL(url);
  return new Promise((resolve, reject) => {
    const headers = host === undefined ? {} : { host };
    const req = http.request({ host: '127.0.0.1', port, path, headers, setHost: host !== undefined }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode as number, body: JSON.parse(text) }));
    });
    req.on('error', reject);
    req.end();
  });
}

test('on a loopback address, only localhost names and IP addresses are answered as Host (DNS rebinding): others get 403 and see nothing', async (t) => {
  const { url, server } = await start(t);
  await postJson(`${url}/agent/counter-1/invoke`, { method: 'increment', params: { by: 5 } });
  // A page on attacker.example, its name pointed at 127.0.0.1 after it loaded: its requests carry its own name.
  for (const path of ['/agent/counter-1/state', '/healthz', '/nowhere']) {
    const refused = await getWithHost(url, path, `attacker.example:${server.port}`);
    assert.equal(refused.status, 403, path);
    assert.deepEqual(refused.body, {
      error: `Host "attacker.example:${server.port}" is not allowed here; list it in the server's allowedHosts (agent-router serve --allowed-hosts), as a proxy in front that sends this name needs`,
      code: 'host_not_allowed',
    });
  }
  for (const host of [`localhost:${server.port}`, 'LOCALHOST.', `app.localhost:${server.port}`, `127.0.0.1:${server.port}`, '[::1]', `10.1.2.3:${server.port}`]) {
    const answered = await getWithHost(url, '/agent/counter-1/state', host);
    assert.deepEqual(answered, { status: 200, body: { agent_id: 'counter-1', state: { count: 5 } } }, host);
  }
  assert.equal((await getWithHost(url, '/agent/counter-1/state', 'localhost.attacker.example')).status, 403);
  // An IPv6 address must be the whole host: text after its bracket (other than a port) makes it no address.
  for (const host of ['[::1]attacker.example', '[::1].attacker.example:80', '[::1]:80:80', '[::1']) {
    assert.equal((await getWithHost(url, '/agent/counter-1/state', host)).status, 403, host);
  }
});

test('allowedHosts: listed names (a leading dot: the name and every name under it) are answered; true answers any; on every interface, any by default', async (t) => {
  const { url } = await start(t, { allowedHosts: ['agents.example', '.corp.example'] });
  for (const host of ['agents.example', 'Agents.Example:8080', 'corp.example', 'api.corp.example', 'localhost']) {
    assert.equal((await getWithHost(url, '/healthz', host)).status, 200, host);
  }
  for (const host of ['evil.example', 'agents.example.evil', 'xcorp.example']) {
    assert.equal((await getWithHost(url, '/healthz', host)).status, 403, host);
  }
  const any = await start(t, { allowedHosts: true });
  assert.equal((await getWithHost(any.url, '/healthz', 'anything.example')).status, 200);

  const { registry } = makeRegistry();
  const everywhere = new AgentServer(registry, { logger: quiet });
  await everywhere.serve(0, '0.0.0.0');
  t.after(() => everywhere.close());
  assert.equal((await getWithHost(`http://127.0.0.1:${everywhere.port}`, '/healthz', 'agents.example')).status, 200, 'reachable from other machines anyway: authorize protects it');

  for (const wrong of [['agents.example:8080'], ['*'], ['*.example.com'], ['http://agents.example'], 'agents.example']) {
    assert.throws(() => new AgentServer(registry, { allowedHosts: wrong as never }), /allowedHosts must be true \(any\) or a list of host names without port/, String(wrong));
  }
  const dotted = await start(t, { allowedHosts: ['agents.example.'] });
  assert.equal((await getWithHost(dotted.url, '/healthz', 'agents.example')).status, 200, 'a trailing dot is read off the entry as off the header');
});

test('a host name that resolves to a loopback address (this machine\'s name in /etc/hosts, 127.1) is answered as 127.0.0.1 is: other Host names get 403', async (t) => {
  const { registry } = makeRegistry();
  const server = new AgentServer(registry, { logger: quiet });
  t.after(() => server.close());
  await server.serve(0, '127.1'); // what getaddrinfo makes 127.0.0.1 of, as it would a name listed in /etc/hosts
  assert.equal((server.httpServer?.address() as net.AddressInfo).address, '127.0.0.1', 'listening on loopback only');
  assert.equal((await getWithHost(`http://127.0.0.1:${server.port}`, '/healthz', 'attacker.example')).status, 403);
  assert.equal((await getWithHost(`http://127.0.0.1:${server.port}`, '/healthz', `localhost:${server.port}`)).status, 200);
});

test('a loopback address is one however it is written; the listener on your own server checks Host against allowedHosts only, over HTTP/2 too', async (t) => {
  for (const address of ['127.0.0.1', '127.9.9.9', '::1', '0:0:0:0:0:0:0:1', '[::1]', '::ffff:127.0.0.1', 'localhost', 'app.localhost']) assert.ok(isLoopback(address), address);
  for (const address of ['0.0.0.0', '::', '10.0.0.1', '::2', 'example.com', 'localhost.example.com']) assert.ok(!isLoopback(address), address);

  const { registry } = makeRegistry();
  const mounted = new AgentServer(registry, { logger: quiet, allowedHosts: ['app.example.com'] });
  t.after(() => mounted.close());
  const h2 = http2.createServer(mounted.listener);
  await new Promise<void>((resolve) => h2.listen(0, '127.0.0.1', resolve));
  const session = http2.connect(`http://127.0.0.1:${(h2.address() as net.AddressInfo).port}`);
  // The session first: the server's close() waits for it.
  t.after(() => new Promise<void>((resolve) => {
    session.destroy();
    h2.close(() => resolve());
  }));
  const status = (authority: string): Promise<number> => new Promise((resolve, reject) => {
    const stream = session.request({ ':path': '/healthz', ':authority': authority });
    stream.on('response', (headers) => resolve(headers[':status'] as number));
    stream.on('error', reject);
    stream.resume();
  });
  assert.equal(await status('evil.test'), 403);
  assert.equal(await status('app.example.com'), 200);
});

test('the listener on your own HTTP/2 server: close() answers and drains without a Connection header, which HTTP/2 forbids', async (t) => {
  const warnings: Error[] = [];
  const onWarning = (warning: Error): void => void warnings.push(warning);
  process.on('warning', onWarning);
  t.after(() => process.off('warning', onWarning));
  const release = deferred();
  const registry = new AgentRegistry();
  registry.register('.*', class extends Agent {
    constructor(id: string) {
      super(id, { model: scriptedModel(async () => { await release.promise; return 'late'; }), storage: new MemoryStorage() });
    }
  });
  const mounted = new AgentServer(registry, { logger: quiet, shutdownTimeout: 5 });
  const h2 = http2.createServer(mounted.listener);
  await new Promise<void>((resolve) => h2.listen(0, '127.0.0.1', resolve));
  const session = http2.connect(`http://127.0.0.1:${(h2.address() as net.AddressInfo).port}`);
  t.after(() => new Promise<void>((resolve) => {
    release.resolve();
    session.destroy();
    h2.close(() => resolve());
  }));
  const request = (path: string, body?: string): Promise<{ status: number; text: string }> => new Promise((resolve, reject) => {
    const stream = session.request({ ':method': body === undefined ? 'GET' : 'POST', ':path': path, 'content-type': 'application/json' });
    let status = 0;
    let text = '';
    stream.on('response', (headers) => (status = headers[':status'] as number));
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => (text += chunk));
    stream.on('end', () => resolve({ status, text }));
    stream.on('error', reject);
    stream.end(body);
  });
  // In flight when close() begins (its answer is not written yet), then one that comes during close().
  const running = request('/agent/h2-1/chat', JSON.stringify({ message: 'hi' }));
  await new Promise((resolve) => setTimeout(resolve, 100));
  const closing = mounted.close();
  const refused = await request('/agent/h2-2/state');
  assert.equal(refused.status, 503);
  assert.equal(JSON.parse(refused.text).code, 'shutting_down');
  release.resolve();
  const late = await running;
  assert.deepEqual({ ...late, text: noTurnId(JSON.parse(late.text)) }, { status: 200, text: { agent_id: 'h2-1', response: 'late' } });
  await closing;
  await new Promise(setImmediate);
  assert.deepEqual(warnings.map((warning) => warning.message), []);
});

test('close() stores what a failed chat turn carried (a tool\'s setState) before it drops the agent', async () => {
  const memory = new MemoryStorage();
  // Slow commits: close() would otherwise drop the instance before the carried turn stored anything.
  const storage: Storage = {
    load: (id) => memory.load(id),
    head: (id) => memory.head(id),
    lock: (id, signal) => memory.lock(id, signal),
    async commit(id, turn) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      return memory.commit(id, turn);
    },
  };
  class Tooling extends Agent<{ tool?: string }> {
    constructor(id: string) {
      let self: Tooling | undefined;
      super(id, {
        storage,
        model: {
          name: 'tool-user',
          async *stream() {
            void self?.setState({ tool: 'done' });
            throw new Error('model failed');
          },
        },
      });
      self = this;
    }
  }
  const registry = new AgentRegistry();
  registry.register('tool-[0-9]+', Tooling);
  const server = new AgentServer(registry, { logger: quiet });
  await server.serve(0);
  const failed = await postJson(`${server.url}/agent/tool-1/chat`, { message: 'go' });
  assert.equal(failed.status, 500);
  await server.close();
  assert.deepEqual((await memory.load('tool-1'))?.state, { tool: 'done' });
});
