import assert from 'node:assert/strict';
import net from 'node:net';
import { test, type TestContext } from 'node:test';
import { gzipSync } from 'node:zlib';
import { Agent } from '../../src/agent/agent.ts';
import { echoModel } from '../../src/models/echo.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentServer } from '../../src/server/server.ts';
import { postTransferCoded } from '../helpers/http.ts';

/** Sends raw bytes and reads until the server closes the connection. */
function rawExchange(port: number, bytes: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.end(bytes));
    let reply = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (reply += chunk));
    socket.on('close', () => resolve(reply));
    socket.on('error', reject);
  });
}

/** An AgentServer of echo agents on a free port, closed after the test. */
async function echoServer(t: TestContext): Promise<AgentServer> {
  const registry = new AgentRegistry();
  registry.register('.*', class extends Agent {
    constructor(id: string) {
      super(id, { model: echoModel() });
    }
  });
  const server = new AgentServer(registry);
  await server.serve(0);
  t.after(() => server.close());
  return server;
}

test('what Node\'s parser refuses is still answered in the JSON error shape', async (t) => {
  const server = await echoServer(t);

  const malformed = await rawExchange(server.port as number, 'NOT HTTP AT ALL\r\n\r\n');
  assert.match(malformed, /^HTTP\/1\.1 400 Bad Request\r\n/);
  assert.match(malformed, /content-type: application\/json/i);
  assert.deepEqual(JSON.parse(malformed.slice(malformed.indexOf('\r\n\r\n') + 4)), { error: 'Malformed HTTP request', code: 'bad_request' });

  const huge = await rawExchange(server.port as number, `GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
  assert.match(huge, /^HTTP\/1\.1 431 /);
  assert.equal(JSON.parse(huge.slice(huge.indexOf('\r\n\r\n') + 4)).code, 'headers_too_large');
});

test('a transfer coding other than chunked is 501 JSON, before the body is read; the connection keeps serving', async (t) => {
  const server = await echoServer(t);
  const url = `http://127.0.0.1:${server.port as number}/agent/a`;
  const coded = await postTransferCoded(`${url}/chat`, gzipSync('{"message":"hi"}'), 'gzip, chunked');
  assert.equal(coded.status, 501);
  assert.equal((await coded.json()).code, 'unsupported_transfer_encoding');
  // Its chunks are framed as usual, so Node reads past them and the next request on the connection is answered.
  const reply = await rawExchange(server.port as number, [
    `POST /agent/a/chat HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: x-custom, chunked\r\n\r\n10\r\n{"message":"hi"}\r\n0\r\n\r\n`,
    'GET /agent/a/state HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n',
  ].join(''));
  assert.match(reply, /^HTTP\/1\.1 501 /);
  assert.match(reply, /unsupported_transfer_encoding[\s\S]*HTTP\/1\.1 200 [\s\S]*\{"agent_id":"a","state":\{\}\}$/);
});

test('an Expect other than 100-continue (417) and an HTTP/1.1 request without Host (400) are answered as JSON', async (t) => {
  const server = await echoServer(t);
  const bodyOf = (reply: string): unknown => JSON.parse(reply.slice(reply.indexOf('\r\n\r\n') + 4));

  const expect = await rawExchange(server.port as number, 'GET /healthz HTTP/1.1\r\nHost: localhost\r\nExpect: 200-ok\r\n\r\n');
  assert.match(expect, /^HTTP\/1\.1 417 /);
  assert.deepEqual(bodyOf(expect), { error: 'Expect "200-ok" is not supported; only 100-continue is', code: 'expectation_failed' });

  const hostless = await rawExchange(server.port as number, 'GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n');
  assert.match(hostless, /^HTTP\/1\.1 400 /);
  assert.deepEqual(bodyOf(hostless), { error: 'HTTP/1.1 requests must carry a Host header', code: 'missing_host' });

  // HTTP/1.0 has no Host requirement.
  const old = await rawExchange(server.port as number, 'GET /healthz HTTP/1.0\r\n\r\n');
  assert.match(old, /^HTTP\/1\.1 200 /);
});

test('CONNECT gets a JSON 405 and the connection is closed, even when the client sends on without closing', async (t) => {
  const server = await echoServer(t);
  const reply = await new Promise<string>((resolve, reject) => {
    // Written, not ended: a tunnelling client sends its TLS hello right after the request and waits.
    const socket = net.connect(server.port as number, '127.0.0.1', () => socket.write('CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n\x16\x03\x01 hello'));
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      text += chunk;
      if (text.includes('}')) socket.end(); // the whole answer is in: close our side, as a client would
    });
    socket.on('close', () => resolve(text));
    socket.on('error', reject);
  });
  assert.match(reply, /^HTTP\/1\.1 405 Method Not Allowed\r\n/);
  assert.match(reply, /\r\nAllow: GET, HEAD, POST, OPTIONS\r\n/);
  assert.deepEqual(JSON.parse(reply.slice(reply.indexOf('\r\n\r\n') + 4)), { error: 'Method not allowed; CONNECT is not supported (this is not a proxy)', code: 'method_not_allowed' });
  const health = await fetch(`${server.url}/healthz`);
  assert.equal(health.status, 200, 'the server goes on serving');
  await health.body?.cancel();
});

test('a CONNECT client that trickles bytes and never closes is cut, so close() does not wait on it', async (t) => {
  const registry = new AgentRegistry();
  registry.register('.*', class extends Agent {
    constructor(id: string) {
      super(id, { model: echoModel() });
    }
  });
  const server = new AgentServer(registry, { shutdownTimeout: 0.1 });
  await server.serve(0);
  const socket = net.connect({ port: server.port as number, host: '127.0.0.1', allowHalfOpen: true });
  socket.on('error', () => {});
  socket.write('CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n');
  const trickle = setInterval(() => socket.writable && socket.write('x'), 100);
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
  t.after(() => {
    clearInterval(trickle);
    socket.destroy();
    return server.close();
  });
  await new Promise((resolve) => setTimeout(resolve, 200));
  const watchdog = new Promise<'never'>((resolve) => setTimeout(() => resolve('never'), 15_000).unref());
  assert.notEqual(await Promise.race([server.close(), watchdog]), 'never', 'close() waited on the CONNECT socket');
  await closed;
});

test('a request target in absolute form (as sent to a proxy) is served by its path', async (t) => {
  const server = await echoServer(t);
  const reply = await rawExchange(server.port as number, 'GET http://localhost/agent/echo-1/state HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n');
  assert.match(reply, /^HTTP\/1\.1 200 /);
  assert.deepEqual(JSON.parse(reply.slice(reply.indexOf('\r\n\r\n') + 4)), { agent_id: 'echo-1', state: {} });
});
