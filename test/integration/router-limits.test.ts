import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouter, type AgentRouterOptions } from '../../src/router/router.ts';
import { scriptedModel } from '../../src/models/scripted.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { deferred, postJson, streamChat } from '../helpers/http.ts';
import { listen } from '../helpers/listen.ts';
import { collectSSE } from '../helpers/sse.ts';

const hold = deferred();

class Held extends Agent {
  constructor(id: string) {
    super(id, {
      model: scriptedModel(async function* () {
        yield 'first';
        await hold.promise;
        yield ' last';
      }),
    });
  }
}

async function serve(t: { after: (fn: () => Promise<void>) => void }, options: AgentRouterOptions) {
  const registry = new AgentRegistry();
  registry.register('.*', Held);
  const router = new AgentRouter(registry, { logger: { error: () => {} }, ...options });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  return { url, router };
}

test('maxStreams: streams beyond the cap get 503 JSON with Retry-After; JSON chat still works', async (t) => {
  const { url, router } = await serve(t, { maxStreams: 2 });
  const open = [await streamChat(`${url}/a/chat`, 'x'), await streamChat(`${url}/b/chat`, 'x')];
  assert.equal(router.openStreams, 2);
  const refused = await streamChat(`${url}/c/chat`, 'x');
  assert.equal(refused.status, 503);
  assert.equal(refused.headers.get('retry-after'), '1');
  assert.deepEqual(await refused.json(), { error: 'All 2 streams are in use; retry shortly', code: 'too_many_streams' });
  assert.equal(router.pool?.peek('c'), undefined, 'a refused stream makes no instance');
  hold.resolve();
  for (const res of open) assert.equal((await collectSSE(res)).text, 'first last');
  assert.equal(router.openStreams, 0);
  assert.equal((await collectSSE(await streamChat(`${url}/c/chat`, 'x'))).text, 'first last');
});

test('CORS is off by default: no CORS headers, OPTIONS is 405', async (t) => {
  const { url } = await serve(t, {});
  const res = await fetch(`${url}/a/state`, { headers: { origin: 'https://app.example' } });
  assert.equal(res.headers.get('access-control-allow-origin'), null);
  await res.body?.cancel();
  const preflight = await fetch(`${url}/a/chat`, { method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' } });
  assert.equal(preflight.status, 405);
  await preflight.body?.cancel();
});

test('CORS: origins "*" with credentials is refused when the router is made (it would echo every origin with cookies allowed)', async (t) => {
  assert.throws(() => new AgentRouter(new AgentRegistry(), { cors: { origins: '*', credentials: true } }), {
    name: 'TypeError',
    message: /AgentRouter: cors origins '\*' with credentials: true would let any website send its visitors' cookies.*list the origins/,
  });
  // '*' alone, and credentials with a list, stay allowed.
  const { url } = await serve(t, { cors: { origins: '*' } });
  const reply = await fetch(`${url}/a/state`, { headers: { origin: 'https://any.example' } });
  assert.equal(reply.status, 200);
  assert.equal(reply.headers.get('access-control-allow-origin'), 'https://any.example');
  assert.equal(reply.headers.get('access-control-allow-credentials'), null);
  await reply.body?.cancel();
});

test('CORS: allowed origins are echoed and preflights answered; others get no CORS headers', async (t) => {
  const { url } = await serve(t, { cors: { origins: ['https://app.example'], credentials: true, maxAge: 60 } });
  const preflight = await fetch(`${url}/a/chat`, {
    method: 'OPTIONS',
    headers: { origin: 'https://app.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' },
  });
  assert.equal(preflight.status, 204);
  assert.equal(preflight.headers.get('access-control-allow-origin'), 'https://app.example');
  assert.equal(preflight.headers.get('access-control-allow-methods'), 'POST, OPTIONS');
  // A path that is none of the router's answers 404 JSON that an allowed page can read (its preflight answered too).
  const lost = await postJson(`${url}/a/chat/extra`, { message: 'x' }, { origin: 'https://app.example' });
  assert.equal(lost.status, 404);
  assert.equal(lost.headers.get('access-control-allow-origin'), 'https://app.example');
  const lostPreflight = await fetch(`${url}/a/chat/extra`, { method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' } });
  assert.equal(lostPreflight.status, 204);
  // A page may send its JSON, a token and a request id (which a remote hop carries on) without configuring anything.
  assert.deepEqual(preflight.headers.get('access-control-allow-headers')?.split(', '), ['content-type', 'authorization', 'accept', 'last-event-id', 'x-request-id']);
  assert.equal(preflight.headers.get('access-control-allow-credentials'), 'true');
  assert.equal(preflight.headers.get('access-control-max-age'), '60');
  assert.equal(preflight.headers.get('vary'), 'Origin');

  const reply = await postJson(`${url}/a/chat`, { message: 'x' }, { origin: 'https://app.example' });
  assert.equal(reply.headers.get('access-control-allow-origin'), 'https://app.example');
  const stream = await fetch(`${url}/a/state`, { headers: { origin: 'https://app.example' } });
  assert.equal(stream.headers.get('access-control-allow-origin'), 'https://app.example');
  await stream.body?.cancel();

  const evil = await fetch(`${url}/a/chat`, { method: 'OPTIONS', headers: { origin: 'https://evil.example', 'access-control-request-method': 'POST' } });
  assert.equal(evil.status, 204);
  assert.equal(evil.headers.get('access-control-allow-origin'), null);
  assert.equal(evil.headers.get('access-control-allow-methods'), null);
});

test('CORS headers reach an SSE response too', async (t) => {
  const { url } = await serve(t, { cors: { origins: '*' } });
  const res = await fetch(`${url}/a/chat?stream=true`, {
    method: 'POST',
    headers: { origin: 'https://any.example', 'content-type': 'application/json' },
    body: JSON.stringify({ message: 'x' }),
  });
  assert.equal(res.headers.get('access-control-allow-origin'), 'https://any.example');
  assert.equal(res.headers.get('content-type'), 'text/event-stream');
  assert.equal((await collectSSE(res)).text, 'first last');
});

test('CORS adds Origin to a Vary header the host set, and keeps the host\'s', async (t) => {
  const router = new AgentRouter(new AgentRegistry(), { cors: { origins: ['https://app.example'] } });
  const { url, close } = await listen((req, res) => {
    res.setHeader('Vary', 'Accept-Language');
    router.toRequestListener()(req, res);
  });
  t.after(close);
  const res = await fetch(`${url}/a/state`, { headers: { origin: 'https://app.example' } });
  assert.equal(res.headers.get('vary'), 'Accept-Language, Origin');
  await res.body?.cancel();
});

test('CORS exposes Retry-After to an allowed page (not safelisted), after what the host exposes; preflights and refused origins get none', async (t) => {
  const router = new AgentRouter(new AgentRegistry(), { cors: { origins: ['https://app.example'] } });
  const { url, close } = await listen((req, res) => {
    if (req.url?.startsWith('/host/') === true) res.setHeader('Access-Control-Expose-Headers', 'X-Request-Id');
    router.toRequestListener()(req, res);
  });
  t.after(close);
  const expose = async (path: string, init: RequestInit): Promise<string | null> => {
    const res = await fetch(`${url}${path}`, init);
    await res.body?.cancel();
    return res.headers.get('access-control-expose-headers');
  };
  assert.equal(await expose('/a/state', { headers: { origin: 'https://app.example' } }), 'Retry-After, Turn-Id, X-Request-Id, Agent-Router-Upstream');
  assert.equal(await expose('/host/state', { headers: { origin: 'https://app.example' } }), 'X-Request-Id, Retry-After, Turn-Id, Agent-Router-Upstream');
  assert.equal(await expose('/a/state', { headers: { origin: 'https://evil.example' } }), null);
  assert.equal(await expose('/a/chat', { method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' } }), null);
});

test('a CORS origin predicate that throws answers 500 JSON, and the server keeps serving', async (t) => {
  const { url } = await serve(t, {
    cors: {
      origins: (origin) => {
        if (origin === 'https://boom.example') throw new Error('predicate bug');
        return true;
      },
    },
  });
  const boom = await fetch(`${url}/a/state`, { headers: { origin: 'https://boom.example' } });
  assert.equal(boom.status, 500);
  assert.deepEqual(await boom.json(), { error: 'Internal error', code: 'internal_error' });
  const fine = await fetch(`${url}/a/state`, { headers: { origin: 'https://fine.example' } });
  assert.equal(fine.status, 200);
  assert.equal(fine.headers.get('access-control-allow-origin'), 'https://fine.example');
});
