// Turn control through a front router whose agents live behind HTTPTransport: cancel is relayed to the remote, rejoin is served from the front's own log.
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { HTTPTransport } from '../../src/transports/http.ts';
import { postJson, streamChat } from '../helpers/http.ts';
import { listen } from '../helpers/listen.ts';
import { collectSSE } from '../helpers/sse.ts';
import { eventsOf, rest, serveWords, Steps, take } from '../helpers/turns-serve.ts';

const WORDS = ['one', ' two', ' three'];

/** A front router forwarding every id to `remoteUrl`; `logged` gets the message of each line it logs. */
async function front(t: TestContext, remoteUrl: string, logged: string[] = []): Promise<string> {
  const registry = new AgentRegistry();
  registry.register('.*', new HTTPTransport(remoteUrl));
  const { url, close } = await listen(new AgentRouter(registry, { logger: { error: (message: string) => void logged.push(message) } }).toRequestListener());
  t.after(close);
  return url;
}

test('remote cancel: the front relays POST /cancel to the remote, whose turn ends cancelled and stores nothing', async (t) => {
  const steps = new Steps();
  const remote = await serveWords(t, WORDS, {}, steps);
  const logged: string[] = [];
  const url = await front(t, remote.url, logged);
  const running = await streamChat(`${url}/bot/chat`, 'go', { query: '?stream=events' });
  assert.equal(running.status, 200);
  const turnId = running.headers.get('turn-id');
  assert.ok(turnId);
  const events = eventsOf(running);
  const [started] = await take(events, 1);
  assert.equal(JSON.parse(started?.data ?? '{}').turn_id, turnId, 'the front streams the remote turn under its id');
  const cancelled = await postJson(`${url}/bot/cancel`, { turn_id: turnId });
  assert.equal(cancelled.status, 202);
  assert.deepEqual(cancelled.body, { agent_id: 'bot', turn_id: turnId, cancelled: true });
  const rest: { event: string; data: string }[] = [];
  for await (const event of events) rest.push(event);
  const last = rest.at(-1);
  assert.equal(last?.event, 'turn.failed');
  assert.equal(JSON.parse(last?.data ?? '{}').code, 'cancelled');
  steps.release();
  assert.equal(await remote.storage.load('bot'), undefined, 'the cancelled turn left no trace on the remote');
  assert.deepEqual(logged, [], 'a cancel is no failure of the hop: the front logs nothing');
});

test('remote cancel: with no turn running, the remote 404 no_running_turn comes back through the front, naming the remote', async (t) => {
  const remote = await serveWords(t, WORDS);
  const url = await front(t, remote.url);
  const reply = await postJson(`${url}/bot/cancel`, {});
  assert.equal(reply.status, 404);
  assert.equal(reply.body.code, 'no_running_turn');
  assert.match(String(reply.body.error), new RegExp(remote.url.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
});

test('remote rejoin: a stream the front relayed can be rejoined at the front after a cut, each event once', async (t) => {
  const steps = new Steps();
  const remote = await serveWords(t, WORDS, {}, steps);
  const url = await front(t, remote.url);
  const leave = new AbortController();
  const first = await streamChat(`${url}/bot/chat`, 'go', { signal: leave.signal, query: '?stream=true&on_disconnect=continue' });
  const turnId = first.headers.get('turn-id');
  steps.release(1);
  const [one] = await take(eventsOf(first), 1);
  assert.equal(one?.data, 'one');
  assert.equal(one?.id, `${turnId}:1`);
  leave.abort();
  const rejoined = await fetch(`${url}/bot/turns/${turnId}/events`, { headers: { 'last-event-id': `${turnId}:1` } });
  assert.equal(rejoined.status, 200);
  steps.release();
  const { events } = await collectSSE(rejoined);
  assert.deepEqual(events.map((event) => [event.id, event.data]), [[`${turnId}:2`, ' two'], [`${turnId}:3`, ' three'], [`${turnId}:4`, '[DONE]']]);
});

test('remote busy policy: ?when_busy= goes on to the remote, which refuses (reject) or cuts the running turn (interrupt)', async (t) => {
  const steps = new Steps();
  const remote = await serveWords(t, WORDS, {}, steps);
  const url = await front(t, remote.url);
  const running = await streamChat(`${url}/bot/chat`, 'first', { query: '?stream=events' });
  const events = eventsOf(running);
  await take(events, 1);
  const refused = await postJson(`${url}/bot/chat?when_busy=reject`, { message: 'me too' });
  assert.equal(refused.status, 409);
  assert.equal(refused.body.code, 'agent_busy');
  assert.equal(refused.headers.get('retry-after'), '1');
  const refusedInvoke = await postJson(`${url}/bot/invoke?when_busy=reject`, { method: 'anything' });
  assert.equal(refusedInvoke.body.code, 'agent_busy', 'invoke relays it too');
  const interrupting = postJson(`${url}/bot/chat?when_busy=interrupt`, { message: 'now' });
  const cut = await rest(events);
  assert.equal(JSON.parse(cut.at(-1)?.data ?? '{}').code, 'cancelled', 'the running turn was cut by the interrupt');
  steps.release();
  const took = await interrupting;
  assert.equal(took.status, 200);
  assert.equal(took.body.response, WORDS.join(''));
  const bad = await postJson(`${url}/bot/chat?when_busy=later`, { message: 'x' });
  assert.equal(bad.status, 400, 'a bad value is refused at the front');
});

test('remote on_disconnect: HTTPTransport sends onDisconnect on, so a remote turn whose caller left runs to its end and commits', async (t) => {
  const steps = new Steps();
  const remote = await serveWords(t, WORDS, {}, steps);
  const transport = new HTTPTransport(`${remote.url}`);
  const left = new AbortController();
  const stream = transport.stream('bot', 'go', { signal: left.signal, onDisconnect: 'continue' });
  steps.release(1);
  for await (const chunk of stream) {
    assert.equal(chunk, 'one');
    break;
  }
  left.abort();
  steps.release();
  const deadline = Date.now() + 2000;
  while ((await remote.storage.load('bot')) === undefined && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
  const stored = await remote.storage.load('bot');
  assert.deepEqual(stored?.messages.map((m) => m.content), ['go', WORDS.join('')], 'the turn committed without its caller');
  await assert.rejects(transport.chat('bot', 'go', { whenBusy: 'soon' as never }), /whenBusy must be enqueue, reject, interrupt/);
  await assert.rejects(transport.stream('bot', 'go', { onDisconnect: 'stay' as never }).ready, /onDisconnect must be cancel, continue/);
});
