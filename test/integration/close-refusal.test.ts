import assert from 'node:assert/strict';
import net from 'node:net';
import { test, type TestContext } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { echoModel } from '../../src/models/echo.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentServer } from '../../src/server/server.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { listen } from '../helpers/listen.ts';

/**
 * nginx talks to its upstream in HTTP/1.0 by default (`proxy_http_version
 * 1.0`), one connection per request, and sends the whole body it buffered
 * even when the answer comes first. An answer given before the body was read
 * (404, 413, 415, 403) on such a connection must not reset it: nginx, still
 * writing, then fails on the reset and answers its own 502 page instead
 * (measured with nginx 1.22: a 1 MB body to an unknown path, 8 times in 10).
 */

function registry(): AgentRegistry {
  const storage = new MemoryStorage();
  const registry = new AgentRegistry();
  registry.register('bot-[0-9]+', class extends Agent {
    constructor(id: string) {
      super(id, { model: echoModel(), storage });
    }
  });
  return registry;
}

interface Outcome {
  /** Everything the server sent. */
  received: string;
  /** The body bytes the client managed to write before the connection ended. */
  written: number;
  /** A socket error (EPIPE, ECONNRESET) the client met, if any. */
  error: string | undefined;
}

/**
 * Sends `head` and then `size` bytes of body as fast as the connection takes
 * them, as a proxy relaying a buffered upload does: it goes on writing after
 * the answer and the server's FIN (half open, as nginx does), then closes.
 */
function upload(port: number, head: string, size: number): Promise<Outcome> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    let received = '';
    let written = 0;
    let error: string | undefined;
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => (received += chunk));
    socket.on('error', (e: NodeJS.ErrnoException) => (error ??= e.code));
    socket.on('close', () => resolve({ received, written, error }));
    const piece = Buffer.alloc(256 * 1024, 0x78);
    const send = (): void => {
      while (written < size && !socket.destroyed) {
        written += piece.length;
        if (!socket.write(piece)) return void socket.once('drain', send);
      }
      socket.end();
    };
    socket.once('connect', () => {
      socket.write(head);
      send();
    });
  });
}

const SIZE = 8 * 1024 * 1024;

async function routerPort(t: TestContext): Promise<number> {
  const listening = await listen(new AgentRouter(registry(), { bodyLimit: 1024 * 1024 }).toRequestListener());
  t.after(listening.close);
  return listening.port;
}

async function serverPort(t: TestContext): Promise<number> {
  const server = new AgentServer(registry(), { authorize: (req) => req.headers.authorization === 'yes' });
  await server.serve(0);
  t.after(() => server.close());
  return server.port as number;
}

const cases: Array<[string, string, RegExp]> = [
  ['over bodyLimit by Content-Length', `POST /bot-1/chat HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: ${SIZE}\r\n\r\n`, /^HTTP\/1\.1 413 [^]*"code":"body_too_large"\}$/],
  ['not JSON', `POST /bot-1/chat HTTP/1.0\r\nContent-Type: text/plain\r\nContent-Length: ${SIZE}\r\n\r\n`, /^HTTP\/1\.1 415 [^]*"code":"unsupported_media_type"\}$/],
  ['no such route', `POST /no/such/route HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: ${SIZE}\r\n\r\n`, /^HTTP\/1\.1 404 [^]*"code":"not_found"\}$/],
  ['HTTP/1.1 with Connection: close', `POST /bot-1/chat HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${SIZE}\r\n\r\n`, /^HTTP\/1\.1 413 [^]*"code":"body_too_large"\}$/],
];

test('a router answering before the body on a connection that closes reads the upload on: the client gets the answer, not a reset', async (t) => {
  const port = await routerPort(t);
  for (const [name, head, answer] of cases) {
    const outcome = await upload(port, head, SIZE);
    assert.equal(outcome.error, undefined, `${name}: the client writing its body met a reset`);
    assert.equal(outcome.written, SIZE, `${name}: the whole upload was taken`);
    assert.match(outcome.received, answer, name);
    assert.match(outcome.received, /\r\nconnection: close\r\n/i, name);
  }
});

test('AgentServer answering before the body on a connection that closes reads the upload on, for its own answers too (404, 403)', async (t) => {
  const port = await serverPort(t);
  const own: Array<[string, string, RegExp]> = [
    ['no such route', `POST /elsewhere HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: ${SIZE}\r\n\r\n`, /^HTTP\/1\.1 404 [^]*"code":"not_found"\}$/],
    ['refused by authorize', `POST /agent/bot-1/chat HTTP/1.0\r\nAuthorization: no\r\nContent-Type: application/json\r\nContent-Length: ${SIZE}\r\n\r\n`, /^HTTP\/1\.1 403 [^]*"code":"forbidden"\}$/],
    ['over bodyLimit', `POST /agent/bot-1/chat HTTP/1.0\r\nAuthorization: yes\r\nContent-Type: application/json\r\nContent-Length: ${SIZE}\r\n\r\n`, /^HTTP\/1\.1 413 [^]*"code":"body_too_large"\}$/],
  ];
  for (const [name, head, answer] of own) {
    const outcome = await upload(port, head, SIZE);
    assert.equal(outcome.error, undefined, `${name}: the client writing its body met a reset`);
    assert.equal(outcome.written, SIZE, `${name}: the whole upload was taken`);
    assert.match(outcome.received, answer, name);
  }
});
