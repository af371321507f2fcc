/**
 * An agent id is cut out of the request target. Kept as it was cut, V8 would
 * keep the whole target (query string and all) alive for as long as the
 * registry's cache, the pool or MemoryStorage keeps the id.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { test } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { echoModel } from '../../src/models/echo.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentServer } from '../../src/server/server.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { settledHeap } from '../helpers/fuzz-heap.ts';

/** node:http, not fetch: fetch holds on to its recent requests' URLs for a while (bounded), which would hide what the server keeps. */
const client = new http.Agent({ keepAlive: true });

function send(method: string, url: string, body?: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, agent: client, headers: body === undefined ? {} : { 'content-type': 'application/json' } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const IDS = 300;
// Under Node's 16 KiB limit on a request head.
const PAD = 'x'.repeat(12_000);

test('a long query string is not kept with the agent id: ids read or chatted with cost their own size, not the request\'s', async (t) => {
  const storage = new MemoryStorage();
  class Echo extends Agent {
    constructor(id: string) {
      super(id, { model: echoModel(), storage });
    }
  }
  const registry = new AgentRegistry();
  registry.register('.*', Echo);
  const server = new AgentServer(registry, { maxAgents: 50, idleTimeout: 0 });
  await server.serve(0);
  t.after(async () => {
    client.destroy();
    await server.close();
  });
  const url = `http://127.0.0.1:${server.port}/agent`;
  // Warm up every path first, so what follows measures only what each new id keeps.
  await send('GET', `${url}/warm-up-agent-0/state?pad=${PAD}`);
  await send('POST', `${url}/warm-up-agent-1/chat?pad=${PAD}`, '{"message":"hi"}');
  const before = await settledHeap();
  for (let i = 0; i < IDS; i++) {
    // Ids of 13 characters or more: shorter cuts are copied by V8 anyway.
    assert.equal(await send('GET', `${url}/read-only-agent-${i}/state?pad=${PAD}`), 200);
    assert.equal(await send('POST', `${url}/chatting-agent-${i}/chat?pad=${PAD}`, '{"message":"hi"}'), 200);
  }
  const perId = (await settledHeap() - before) / (2 * IDS);
  // Measured about 1.5 KB per id (the resolve cache, the stored history, pool entries
  // for the 50 live agents); keeping each 12 KB target would be over 12 KB per id.
  assert.ok(perId < 4096, `${perId.toFixed(0)} bytes kept per id`);
  console.log(`heap kept per id: ${perId.toFixed(0)} bytes`);
});
