import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { AgentRouter } from '../../src/router/router.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentServer } from '../../src/server/server.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { echoOn } from '../helpers/agents.ts';
import { listen } from '../helpers/listen.ts';

/** An origin is allowed only when it is one listed, whole: a longer name that starts like one is another site. */

const ALLOWED = 'https://app.example.com';
const cors = { origins: [ALLOWED], credentials: true };
const LOOKALIKES = ['https://app.example.com.evil.net', 'https://app.example.com:8443', 'https://app.example.co', 'http://app.example.com'];

function registry(): AgentRegistry {
  const registry = new AgentRegistry();
  registry.register('bot-[0-9]+', echoOn(new MemoryStorage()));
  return registry;
}

const hosts: Array<[string, (t: TestContext) => Promise<string>]> = [
  ['toRequestListener()', async (t) => {
    const { url, close } = await listen(new AgentRouter(registry(), { cors }).toRequestListener());
    t.after(close);
    return `${url}/bot-1/chat`;
  }],
  ['AgentServer', async (t) => {
    const server = new AgentServer(registry(), { cors });
    await server.serve(0);
    t.after(() => server.close());
    return `${server.url}/agent/bot-1/chat`;
  }],
];

function preflight(url: string, origin: string): Promise<Response> {
  return fetch(url, { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' } });
}

function chat(url: string, origin: string): Promise<Response> {
  return fetch(url, { method: 'POST', headers: { origin, 'content-type': 'application/json' }, body: JSON.stringify({ message: 'hi' }) });
}

for (const [name, host] of hosts) {
  test(`${name}: an origin that only starts like an allowed one is refused, on the preflight and on the request`, async (t) => {
    const url = await host(t);
    const allowed = await preflight(url, ALLOWED);
    assert.equal(allowed.status, 204);
    assert.equal(allowed.headers.get('access-control-allow-origin'), ALLOWED);
    assert.match(allowed.headers.get('access-control-allow-methods') ?? '', /POST/);
    const served = await chat(url, ALLOWED);
    assert.equal(served.headers.get('access-control-allow-origin'), ALLOWED);
    assert.equal(served.headers.get('access-control-allow-credentials'), 'true');
    await served.text();

    for (const origin of LOOKALIKES) {
      const refused = await preflight(url, origin);
      assert.equal(refused.headers.get('access-control-allow-origin'), null, `preflight from ${origin}`);
      assert.equal(refused.headers.get('access-control-allow-methods'), null, `preflight from ${origin}`);
      assert.equal(refused.headers.get('access-control-allow-credentials'), null, `preflight from ${origin}`);
      const request = await chat(url, origin);
      // The browser blocks the page from reading it: no header names the origin or lets credentials through.
      assert.equal(request.headers.get('access-control-allow-origin'), null, `request from ${origin}`);
      assert.equal(request.headers.get('access-control-allow-credentials'), null, `request from ${origin}`);
      assert.equal(request.headers.get('access-control-expose-headers'), null, `request from ${origin}`);
      assert.match(request.headers.get('vary') ?? '', /origin/i);
      await request.text();
    }
  });
}
