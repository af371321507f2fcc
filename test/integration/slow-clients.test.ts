import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { test } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { scriptedModel } from '../../src/models/scripted.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import type { AgentServerConfig } from '../../src/server/config.ts';
import { AgentServer } from '../../src/server/server.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { HTTPTransport } from '../../src/transports/http.ts';
import { getJson } from '../helpers/http.ts';
import { mib, MiB, settledHeap } from '../helpers/fuzz-heap.ts';
import { withoutIds } from '../helpers/sse.ts';

type After = { after: (fn: () => Promise<void> | void) => void };

/** Small socket timeouts (seconds), so a slow client is cut in a fraction of a second. */
const TIMEOUTS = { keepAliveTimeout: 0.1, headersTimeout: 0.2, requestTimeout: 0.4 } as const;
/** One byte every TRICKLE_MS, at most TRICKLE_BYTES of them: 8 s, 20 to 40 times the timeouts under test. */
const TRICKLE_MS = 20;
const TRICKLE_BYTES = 400;

async function start(t: After, config: AgentServerConfig = {}) {
  const created: string[] = [];
  const logged: unknown[] = [];
  const storage = new MemoryStorage();
  let produced = 0;
  const chunk = 'z'.repeat(64 * 1024);
  class Bot extends Agent {
    constructor(id: string) {
      created.push(id);
      super(id, {
        storage,
        // A "firehose" id streams 2,000 chunks of 64 KiB (128 MiB) unless the reader makes it wait.
        model: scriptedModel(async function* ({ signal }) {
          if (!id.startsWith('firehose')) return yield 'hi';
          for (let i = 0; i < 2000 && !signal.aborted; i++) {
            produced++;
            yield chunk;
          }
        }),
      });
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Bot);
  const server = new AgentServer(registry, { ...TIMEOUTS, logger: { error: (_message, error) => logged.push(error) }, ...config });
  await server.serve(0);
  t.after(() => server.close());
  return { server, port: server.port as number, created, logged, produced: () => produced };
}

/**
 * Opens a socket, writes `head` at once, then `trickle` one byte every
 * TRICKLE_MS, and resolves with everything the server sent once it closes
 * the connection. Fails if the trickle runs out first: the server never cut it.
 */
function trickle(port: number, head: string, trickled: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let received = '';
    let sent = 0;
    socket.setEncoding('utf8');
    socket.on('data', (text: string) => {
      received += text;
    });
    socket.on('error', () => {}); // a reset is how some cuts arrive
    const timer = setInterval(() => {
      if (sent >= TRICKLE_BYTES || sent >= trickled.length) {
        clearInterval(timer);
        socket.destroy();
        reject(new Error(`the server let a client trickle ${sent} bytes over ${sent * TRICKLE_MS} ms without cutting it`));
        return;
      }
      socket.write(trickled[sent++] as string);
    }, TRICKLE_MS);
    socket.on('close', () => {
      clearInterval(timer);
      resolve(received);
    });
    socket.write(head);
  });
}

const HEADERS = 'POST /agent/slow-1/chat HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nX-Padding: ' + 'p'.repeat(TRICKLE_BYTES) + '\r\n\r\n';

test('headers that trickle in are cut at headersTimeout (408), though bytes keep arriving', async (t) => {
  const { port, created, logged } = await start(t);
  const reply = await trickle(port, '', HEADERS);
  assert.match(reply, /^HTTP\/1\.1 408 /);
  assert.deepEqual(created, [], 'no agent was touched');
  assert.deepEqual(logged, []);
});

test('a body that trickles in is cut at requestTimeout (408), and nothing is logged as a server failure', async (t) => {
  const { port, created, logged } = await start(t);
  const body = JSON.stringify({ message: 'x'.repeat(TRICKLE_BYTES) });
  const reply = await trickle(port, `POST /agent/slow-1/chat HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`, body);
  assert.match(reply, /^HTTP\/1\.1 408 /);
  assert.deepEqual(created, [], 'the body never arrived, so no turn began');
  assert.deepEqual(logged.map(String), [], 'a client too slow to send its body is not a server failure');
});

test('fifty slow clients at once are all cut, and the server answers others meanwhile', async (t) => {
  const { server, port } = await start(t);
  // Half trickle from the first byte, half after a request line that came at once.
  const padding = `X-Padding: ${'p'.repeat(TRICKLE_BYTES)}\r\n\r\n`;
  const slow = Array.from({ length: 50 }, (_, i) => (i % 2 === 0 ? trickle(port, '', HEADERS) : trickle(port, 'GET /healthz HTTP/1.1\r\nHost: localhost\r\n', padding)));
  assert.deepEqual((await getJson(`${server.url}/healthz`)).body, { status: 'ok' }, 'answered while fifty clients trickle');
  for (const reply of await Promise.all(slow)) assert.match(reply, /^HTTP\/1\.1 408 /);
});

test('through AgentServer: a stream nobody reads makes its model wait, and server memory stays flat', async (t) => {
  const { server, port, produced } = await start(t, { shutdownTimeout: 0, pingInterval: 0 });
  const before = await settledHeap();
  const req = http.request({ host: '127.0.0.1', port, path: '/agent/firehose-1/chat?stream=true', method: 'POST', headers: { 'content-type': 'application/json' } });
  req.end(JSON.stringify({ message: 'x' }));
  const res = await new Promise<http.IncomingMessage>((resolve) => req.on('response', resolve));
  res.pause();
  // Run until the model stops producing: bounded by count, not by time.
  let previous = -1;
  for (let i = 0; i < 200 && produced() !== previous; i++) {
    previous = produced();
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  const held = (await settledHeap()) - before;
  const count = produced();
  console.log(`slow reader: the model produced ${count} of 2000 chunks (${mib(count * 64 * 1024)} of 128 MiB); heap +${mib(held)}`);
  assert.ok(count < 200, `produced ${count} chunks with nobody reading`);
  // What is held is the socket buffers' worth (a few MiB at most), never the 128 MiB stream.
  assert.ok(held < 32 * MiB, `heap grew by ${mib(held)} while the reader read nothing`);
  req.destroy();
  await server.close();
});

/**
 * Opens a stream whose client never reads; resolves when the server closes
 * its side of that connection (a paused client would not notice), with the
 * client's socket, for the test to destroy.
 */
function unreadStream(server: AgentServer, path: string): { closed: Promise<void>; client: net.Socket } {
  const closed = new Promise<void>((resolve) => server.httpServer?.once('connection', (socket: net.Socket) => socket.once('close', () => resolve())));
  const client = net.connect(server.port as number, '127.0.0.1');
  const body = '{"message":"x"}';
  client.on('error', () => {}); // a reset is how a cut may arrive
  client.write(`POST ${path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  client.pause(); // reads nothing, ever: the kernel's buffers fill, then the server's writes wait
  return { closed, client };
}

test('a stream whose client reads nothing is cut after turnTimeout, local or through HTTPTransport, and a remote\'s connection slot is freed', async (t) => {
  const back = await start(t, { pingInterval: 0, turnTimeout: 0.5 });
  const registry = new AgentRegistry();
  // One connection slot: a stalled stream holding it for ever would refuse every other request (503 upstream_busy).
  registry.register('.*', new HTTPTransport(`http://127.0.0.1:${back.port}/agent`, { maxConnections: 1, timeout: 0.3 }));
  const front = new AgentServer(registry, { pingInterval: 0, turnTimeout: 0.5, logger: { error: () => {} } });
  await front.serve(0);
  t.after(() => front.close());

  for (const [where, server] of [['local', back.server], ['remote', front]] as const) {
    const stalled = unreadStream(server, '/agent/firehose-1/chat?stream=true');
    t.after(() => void stalled.client.destroy());
    // Bounded by this watchdog, not timed: the server has to close the connection by itself.
    const watchdog = new Promise<'never'>((resolve) => setTimeout(() => resolve('never'), 15_000).unref());
    assert.notEqual(await Promise.race([stalled.closed, watchdog]), 'never', `${where}: the server never closed a stream nobody reads`);
    for (let i = 0; i < 100 && server.router.openStreams > 0; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(server.router.openStreams, 0, `${where}: the stream is over`);
  }
  const after = await getJson(`${front.url}/agent/plain-1/state`);
  assert.equal(after.status, 200, 'the remote slot the stalled stream held is free again');
});

test('a client that reads slowly but steadily is never cut, though its last frames take longer than turnTimeout to read', async (t) => {
  const registry = new AgentRegistry();
  const delta = 'y'.repeat(16 * 1024);
  // 384 deltas of 16 KiB, handed over at once: the turn completes once the socket's buffers take them,
  // and turn.finished then carries the whole 6 MiB reply again, more than the kernel's buffers hold.
  registry.register('.*', class extends Agent {
    constructor(id: string) {
      super(id, { model: scriptedModel(() => Array.from({ length: 384 }, () => delta)) });
    }
  });
  const server = new AgentServer(registry, { pingInterval: 0, turnTimeout: 1 });
  await server.serve(0);
  t.after(() => server.close());
  const socket = net.connect(server.port as number, '127.0.0.1');
  t.after(() => void socket.destroy());
  const body = '{"message":"x"}';
  socket.write(`POST /agent/big-1/chat?stream=events HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);
  socket.pause();
  // 256 KiB every 100 ms, about 2.6 MB/s: the 12 MiB take some 5 s, several turnTimeouts, never a pause of one.
  let received = '';
  const reading = setInterval(() => {
    const piece = socket.read(256 * 1024) ?? socket.read();
    if (piece !== null) received += piece.toString('latin1');
  }, 100);
  t.after(() => clearInterval(reading));
  const ended = new Promise<void>((resolve) => socket.on('close', () => resolve()));
  socket.on('end', () => {
    clearInterval(reading);
    for (let piece = socket.read(); piece !== null; piece = socket.read()) received += piece.toString('latin1');
  });
  socket.on('error', () => {});
  await ended;
  assert.match(withoutIds(received), /event: turn\.finished\ndata: \{"type":"turn\.finished","result":\{"agent_id":"big-1","text":"y+"\}\}\n\n/, 'the stream arrived whole, turn.finished included');
});

test('a JSON answer whose client reads nothing (a large state, an action\'s result) is cut after turnTimeout; one read at once arrives whole', async (t) => {
  // 16 MiB: more than the kernel's socket buffers take, so most of the answer waits in the server for the client.
  const big = 'b'.repeat(16 * 1024 * 1024);
  const registry = new AgentRegistry();
  registry.register('.*', class extends Agent<{ blob: string }> {
    static override actions = ['fetchBlob'];
    constructor(id: string) {
      super(id, { model: scriptedModel(() => ['hi']), initialState: { blob: big } });
    }
    fetchBlob(): string {
      return this.state.blob;
    }
  });
  const logged: unknown[] = [];
  const server = new AgentServer(registry, { ...TIMEOUTS, turnTimeout: 0.5, logger: { error: (_message, error) => logged.push(error) } });
  await server.serve(0);
  t.after(() => server.close());

  const invoke = '{"method":"fetchBlob"}';
  const requests = {
    state: 'GET /agent/blob-1/state HTTP/1.1\r\nHost: localhost\r\n\r\n',
    invoke: `POST /agent/blob-1/invoke HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${invoke.length}\r\n\r\n${invoke}`,
  };
  for (const [what, request] of Object.entries(requests)) {
    const closed = new Promise<void>((resolve) => server.httpServer?.once('connection', (socket: net.Socket) => socket.once('close', () => resolve())));
    const client = net.connect(server.port as number, '127.0.0.1');
    t.after(() => void client.destroy());
    client.on('error', () => {}); // a reset is how a cut may arrive
    client.write(request);
    client.pause(); // reads nothing, ever: a few bytes sent, 16 MiB held for it
    // Bounded by this watchdog, not timed: the server has to close the connection by itself.
    const watchdog = new Promise<'never'>((resolve) => setTimeout(() => resolve('never'), 15_000).unref());
    assert.notEqual(await Promise.race([closed, watchdog]), 'never', `${what}: the server never closed a connection whose client reads nothing`);
  }
  const read = await getJson(`${server.url}/agent/blob-1/state`);
  assert.equal(read.status, 200);
  assert.equal((read.body as { state: { blob: string } }).state.blob.length, big.length, 'a client that reads gets it all');
  assert.deepEqual(logged, [], 'a client that reads nothing is not a server failure');
});
