import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import net from 'node:net';
import { test, type TestContext } from 'node:test';
import { continueListener } from '../../src/http/continue.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentServer } from '../../src/server/server.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { echoOn } from '../helpers/agents.ts';

/**
 * `Expect: 100-continue` on a request that will be refused on its headers
 * (no route, no pattern matching its id, too large, not JSON) is answered
 * at once, with no `100 Continue` and without waiting for the body; one
 * that will be served gets the 100, then its answer.
 */

const BODY_LIMIT = 1024;

function registry(): AgentRegistry {
  const registry = new AgentRegistry();
  registry.register('bot-[0-9]+', echoOn(new MemoryStorage()));
  return registry;
}

/** Sends `head` and no body; resolves with what the server sent until it closed the connection, or until `until` matched. */
function holdBody(port: number, head: string, until?: RegExp): Promise<{ received: string; socket: net.Socket }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let received = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => {
      received += chunk;
      if (until?.test(received) === true) resolve({ received, socket });
    });
    socket.on('error', reject);
    socket.on('close', () => resolve({ received, socket }));
    socket.write(head);
  });
}

const CHAT = '{"message":"hello"}';
const head = (path: string, headers = `Content-Type: application/json\r\nContent-Length: ${CHAT.length}\r\n`): string =>
  `POST ${path} HTTP/1.1\r\nHost: localhost\r\n${headers}Expect: 100-continue\r\n\r\n`;

async function checkRefusals(port: number, base: string): Promise<void> {
  const refusals: Array<[string, string, number, string]> = [
    ['no route', head(`${base}/bot-1/chat/more`), 404, 'not_found'],
    ['no pattern matches the id', head(`${base}/nobody/chat`), 404, 'agent_not_found'],
    ['no pattern matches the id (generic route)', head(`${base}/nobody`), 404, 'agent_not_found'],
    ['too large', head(`${base}/bot-1/chat`, `Content-Type: application/json\r\nContent-Length: ${BODY_LIMIT + 1}\r\n`), 413, 'body_too_large'],
    ['not JSON', head(`${base}/bot-1/chat`, `Content-Type: text/plain\r\nContent-Length: ${CHAT.length}\r\n`), 415, 'unsupported_media_type'],
  ];
  for (const [name, request, status, code] of refusals) {
    // The body is never sent: a server that waited for it would never close the connection (the test's timeout).
    const { received } = await holdBody(port, request);
    assert.match(received, new RegExp(`^HTTP/1\\.1 ${status} `), `${name}: answered first, with no 100 Continue`);
    assert.match(received, /\r\nconnection: close\r\n/i, `${name}: the held-back body is not read as a next request`);
    assert.match(received, new RegExp(`"code":"${code}"`), name);
  }
  const { received, socket } = await holdBody(port, head(`${base}/bot-1/chat`), /^HTTP\/1\.1 100 Continue\r\n\r\n/);
  assert.equal(received, 'HTTP/1.1 100 Continue\r\n\r\n');
  const answer = await new Promise<string>((resolve) => {
    let text = '';
    socket.on('data', (chunk: string) => {
      text += chunk;
      if (text.includes('"response":"hello"')) resolve(text);
    });
    socket.write(CHAT);
  });
  assert.match(answer, /^HTTP\/1\.1 200 /);
  socket.destroy();
}

test('AgentServer refuses an Expect: 100-continue request at once, without 100 Continue, when no route or pattern takes it, or by size or type', async (t) => {
  const server = new AgentServer(registry(), { bodyLimit: BODY_LIMIT });
  await server.serve(0);
  t.after(() => server.close());
  await checkRefusals(server.port as number, '/agent');
});

async function ownServer(t: TestContext, hold: boolean): Promise<number> {
  const listener = new AgentRouter(registry(), { bodyLimit: BODY_LIMIT }).toRequestListener();
  const server = http.createServer(listener);
  if (hold) server.on('checkContinue', continueListener(listener));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return (server.address() as AddressInfo).port;
}

test('on a server of your own, continueListener(listener) on checkContinue refuses such requests the same way', async (t) => {
  await checkRefusals(await ownServer(t, true), '');
});

test('on a server of your own without it, Node sends 100 Continue first, and the refusal waits for the body', async (t) => {
  const port = await ownServer(t, false);
  const { received, socket } = await holdBody(port, head('/nobody/chat'), /\r\n\r\n/);
  assert.equal(received, 'HTTP/1.1 100 Continue\r\n\r\n');
  socket.end(CHAT);
  const answer = await new Promise<string>((resolve) => {
    let text = '';
    socket.on('data', (chunk: string) => (text += chunk));
    socket.on('close', () => resolve(text));
  });
  assert.match(answer, /^HTTP\/1\.1 404 [^]*"code":"agent_not_found"/);
});

test('continueListener refuses what is not a listener, with the fix', () => {
  assert.throws(() => continueListener(new AgentRouter(registry()) as never), /continueListener\(router\.toRequestListener\(\)\)/);
});
