import assert from 'node:assert/strict';
import test, { type TestContext } from 'node:test';
import { AgentRouter } from '../../src/router/router.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentServer } from '../../src/server/server.ts';
import { HTTPTransport } from '../../src/transports/http.ts';
import { postJson } from '../helpers/http.ts';
import { listen } from '../helpers/listen.ts';

// A front AgentRouter sends `remote-.*` through an HTTPTransport to a back AgentServer that knows no agent:
// the back's 404 must not read like a pattern miss of the front's own.

async function frontAndBack(t: TestContext): Promise<{ front: string; origin: string }> {
  const back = new AgentServer(new AgentRegistry(), { logger: { error: () => {} } });
  await back.serve(0);
  t.after(() => back.close());
  const origin = `http://127.0.0.1:${back.port as number}`;
  const registry = new AgentRegistry();
  registry.register('remote-.*', new HTTPTransport(`${origin}/agent`, { headers: { Authorization: 'Bearer secret-token' } }));
  const front = await listen(new AgentRouter(registry, { logger: { error: () => {} } }).toRequestListener());
  t.after(front.close);
  return { front: front.url, origin };
}

const local = 'AgentRegistry: no pattern matches agent id "nobody"';
const remote = (origin: string) => `AgentRegistry: no pattern matches agent id "remote-nobody" (from the remote agent server at ${origin})`;

test("a 404 agent_not_found from the remote AgentServer names its origin in the message and in Agent-Router-Upstream; the front's own does not", async (t) => {
  const { front, origin } = await frontAndBack(t);
  const relayed = await postJson(`${front}/remote-nobody/chat`, { message: 'x' });
  assert.equal(relayed.status, 404);
  assert.deepEqual(relayed.body, { error: remote(origin), code: 'agent_not_found' });
  assert.equal(relayed.headers.get('agent-router-upstream'), origin);
  assert.ok(!JSON.stringify(relayed.body).includes('secret'));

  const own = await postJson(`${front}/nobody/chat`, { message: 'x' });
  assert.equal(own.status, 404);
  assert.deepEqual(own.body, { error: local, code: 'agent_not_found' });
  assert.equal(own.headers.get('agent-router-upstream'), null);
});

test('a stream the remote refused before it began is answered as JSON, naming the origin in the message and the header', async (t) => {
  const { front, origin } = await frontAndBack(t);
  const res = await fetch(`${front}/remote-nobody/chat?stream=true`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
    body: '{"message":"x"}',
  });
  assert.equal(res.status, 404);
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
  assert.equal(res.headers.get('agent-router-upstream'), origin);
  assert.deepEqual(await res.json(), { error: remote(origin), code: 'agent_not_found' });
});
