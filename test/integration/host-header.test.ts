import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { AgentRouter } from '../../src/router/router.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentServer } from '../../src/server/server.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { echoOn } from '../helpers/agents.ts';
import { listen } from '../helpers/listen.ts';
import { parseResponse, rawExchange } from '../helpers/raw-http.ts';

/**
 * Which host a request is for (RFC 9112, 3.2): a request with two Host
 * headers is refused (400), not answered by the first; an absolute-form
 * target names the host itself, and is routed by its path.
 */

function registry(): AgentRegistry {
  const registry = new AgentRegistry();
  registry.register('bot-[0-9]+', echoOn(new MemoryStorage()));
  return registry;
}

/** AgentServer on loopback, so it answers only Host names of this machine and those allowed. */
async function server(t: TestContext, allowedHosts?: string[]): Promise<number> {
  const server = new AgentServer(registry(), allowedHosts === undefined ? {} : { allowedHosts });
  await server.serve(0);
  t.after(() => server.close());
  return server.port as number;
}

const get = (target: string, ...hosts: string[]): string =>
  `GET ${target} HTTP/1.1\r\n${hosts.map((host) => `Host: ${host}\r\n`).join('')}Connection: close\r\n\r\n`;

test('AgentServer answers a request with two Host headers 400, whichever comes first, and closes the connection', async (t) => {
  const port = await server(t);
  for (const hosts of [['localhost', 'evil.example'], ['evil.example', 'localhost'], ['localhost', 'localhost'], ['localhost, evil.example']]) {
    const reply = parseResponse(await rawExchange(port, get('/agent/bot-1/state', ...hosts)));
    assert.equal(reply.status, 400, hosts.join(' | '));
    assert.equal(reply.body.code, 'bad_host');
    assert.match(reply.head, /\r\nconnection: close/i);
  }
  // Host spelt in another case is the same header.
  const mixed = await rawExchange(port, `GET /agent/bot-1/state HTTP/1.1\r\nHost: localhost\r\nHOST: evil.example\r\nConnection: close\r\n\r\n`);
  assert.equal(parseResponse(mixed).status, 400);
  assert.equal(parseResponse(await rawExchange(port, get('/agent/bot-1/state', 'localhost'))).status, 200);
});

test('the router\'s listener answers a request with two Host headers 400 too', async (t) => {
  const { port, close } = await listen(new AgentRouter(registry()).toRequestListener());
  t.after(close);
  for (const target of ['/bot-1/state', '/no/such/path']) {
    const reply = parseResponse(await rawExchange(port, get(target, 'a.example', 'b.example')));
    assert.equal(reply.status, 400, target);
    assert.equal(reply.body.code, 'bad_host');
  }
  assert.equal(parseResponse(await rawExchange(port, get('/bot-1/state', 'a.example'))).status, 200);
});

test('AgentServer checks an absolute-form target\'s host against the allowed hosts, not the Host header, and routes it by its path', async (t) => {
  const port = await server(t, ['api.example.com']);
  const refused = parseResponse(await rawExchange(port, get('http://other.example/agent/bot-1/state', 'localhost')));
  assert.equal(refused.status, 403);
  assert.equal(refused.body.code, 'host_not_allowed');
  assert.match(refused.body.error, /"other\.example"/);
  for (const target of ['http://api.example.com/agent/bot-1/state', 'HTTP://API.EXAMPLE.COM:8080/agent/bot-1/state', 'http://127.0.0.1/agent/bot-1/state']) {
    const served = parseResponse(await rawExchange(port, get(target, 'evil.example')));
    assert.equal(served.status, 200, target);
    assert.deepEqual(served.body, { agent_id: 'bot-1', state: {} });
  }
  // The name after any userinfo is the host.
  assert.equal(parseResponse(await rawExchange(port, get('http://api.example.com@other.example/agent/bot-1/state', 'localhost'))).status, 403);
  const health = parseResponse(await rawExchange(port, get('http://api.example.com/healthz', 'localhost')));
  assert.deepEqual([health.status, health.body], [200, { status: 'ok' }]);
});
