/**
 * What a newcomer writes first, taken as meant: a plain list of origins (or
 * '*') as the cors option, and the bound port after serve(0).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Agent, AgentRegistry, AgentRouter, AgentServer, echoModel, MemoryStorage } from '../../src/index.ts';
import { listen } from '../helpers/listen.ts';

class Bot extends Agent {
  constructor(id: string) {
    super(id, { model: echoModel(), storage: new MemoryStorage() });
  }
}
const registry = new AgentRegistry();
registry.register('bot-[0-9]+', Bot);

async function preflight(url: string, origin: string): Promise<string | null> {
  const res = await fetch(`${url}/bot-1/chat`, { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'POST' } });
  assert.equal(res.status, 204);
  return res.headers.get('access-control-allow-origin');
}

test("cors: ['http://localhost:3000'] allows that origin and no other, as { origins: [...] } does", async (t) => {
  const { url, close } = await listen(new AgentRouter(registry, { cors: ['http://localhost:3000'] }).toRequestListener());
  t.after(close);
  assert.equal(await preflight(url, 'http://localhost:3000'), 'http://localhost:3000');
  assert.equal(await preflight(url, 'http://localhost:4000'), null);
  const res = await fetch(`${url}/bot-1/chat`, { method: 'POST', headers: { origin: 'http://localhost:3000', 'content-type': 'application/json' }, body: '{"message":"hi"}' });
  assert.equal(res.headers.get('access-control-allow-origin'), 'http://localhost:3000');
});

test("cors: '*' allows any origin; a single origin as a bare string is refused, showing the list to write", async (t) => {
  const { url, close } = await listen(new AgentRouter(registry, { cors: '*' }).toRequestListener());
  t.after(close);
  assert.equal(await preflight(url, 'https://anywhere.example'), 'https://anywhere.example');
  assert.throws(() => new AgentRouter(registry, { cors: 'http://localhost:3000' as never }), { name: 'TypeError', message: /cors must be a list of origins such as \["https:\/\/app.example.com"\], '\*', or an object .*got "http:\/\/localhost:3000"/ });
  assert.throws(() => new AgentRouter(registry, { cors: ['http://localhost:3000/'] }), { name: 'TypeError' });
});

test('AgentServer: cors shorthand also covers its own answers (/healthz)', async (t) => {
  const server = new AgentServer(registry, { cors: ['http://localhost:3000'] });
  const { port, url } = await server.serve(0);
  t.after(() => server.close());
  const typed: number = port;
  assert.equal(url, `http://127.0.0.1:${typed}`);
  assert.equal(server.port, port);
  const res = await fetch(`${url}/healthz`, { headers: { origin: 'http://localhost:3000' } });
  assert.equal(res.headers.get('access-control-allow-origin'), 'http://localhost:3000');
});
