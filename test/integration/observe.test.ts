// Request ids, turn hooks, structured logs and metrics, over real sockets.
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouterError } from '../../src/errors.ts';
import type { Model } from '../../src/models/model.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentRouter, type AgentRouterOptions, type TurnEndInfo, type TurnStartInfo } from '../../src/router/router.ts';
import { AgentServer } from '../../src/server/server.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { HTTPTransport } from '../../src/transports/http.ts';
import { MetricsRegistry } from '../../src/lib/metrics.ts';
import { getJson, pollUntil, postJson } from '../helpers/http.ts';
import { listen } from '../helpers/listen.ts';

/** Replies with the message and reports usage; "fail" makes the model throw. */
const usageModel: Model = {
  name: 'test:usage',
  async *stream(request) {
    const last = request.messages[request.messages.length - 1] as { content: string };
    if (last.content === 'fail') throw new Error('model down');
    yield last.content;
    yield { usage: { inputTokens: 3, outputTokens: 5 } };
  },
};

class Bot extends Agent<{ n: number }> {
  static override actions = ['bump'];
  constructor(id: string) {
    super(id, { model: usageModel, storage: new MemoryStorage(), initialState: { n: 0 } });
  }
  async bump(): Promise<number> {
    await this.setState({ n: this.state.n + 1 });
    return this.state.n;
  }
}

function registry(): AgentRegistry {
  const r = new AgentRegistry();
  r.register('bot-[0-9]+', Bot);
  return r;
}

test('request ids: a plain caller token is echoed, anything else replaced by a new one, on every answer', async (t) => {
  const { url, close } = await listen(new AgentRouter(registry(), { logger: { error: () => {} } }).toRequestListener());
  t.after(close);
  const kept = await postJson(`${url}/bot-1/chat`, { message: 'hi' }, { 'x-request-id': 'abc-123:x.y_z' });
  assert.equal(kept.headers.get('x-request-id'), 'abc-123:x.y_z');
  const odd = await postJson(`${url}/bot-1/chat`, { message: 'hi' }, { 'x-request-id': 'has space' });
  assert.match(odd.headers.get('x-request-id') ?? '', /^[0-9a-f-]{36}$/);
  const made = await postJson(`${url}/bot-1/chat`, { message: 'hi' });
  assert.match(made.headers.get('x-request-id') ?? '', /^[0-9a-f-]{36}$/);
  const refused = await postJson(`${url}/bot-1/chat`, { nope: 1 });
  assert.equal(refused.status, 400);
  assert.match(refused.headers.get('x-request-id') ?? '', /^[0-9a-f-]{36}$/);
  const missing = await getJson(`${url}/no/such/path/here`);
  assert.equal(missing.status, 404);
  assert.ok(missing.headers.get('x-request-id'));
});

test('request ids: the front router sends its id on to a remote agent, made or kept', async (t) => {
  const seen: string[] = [];
  const back = await listen((req, res) => {
    seen.push(String(req.headers['x-request-id']));
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ agent_id: 'r', response: 'ok' }));
  });
  t.after(back.close);
  const front = new AgentRegistry();
  front.register('r', new HTTPTransport(back.url));
  const { url, close } = await listen(new AgentRouter(front, { logger: { error: () => {} } }).toRequestListener());
  t.after(close);
  const kept = await postJson(`${url}/r/chat`, { message: 'hi' }, { 'x-request-id': 'trace-me' });
  assert.equal(kept.status, 200);
  const made = await postJson(`${url}/r/chat`, { message: 'hi' });
  assert.deepEqual(seen, ['trace-me', made.headers.get('x-request-id')]);
});

test('turn hooks: start and end with kind, outcome, code, usage and timing; a throwing or rejecting hook is logged', async (t) => {
  const starts: TurnStartInfo[] = [];
  const ends: TurnEndInfo[] = [];
  const logged: unknown[][] = [];
  let calls = 0;
  const router = new AgentRouter(registry(), {
    logger: { error: (...args: unknown[]) => logged.push(args) },
    onTurnStart: (info) => {
      starts.push(info);
      if (++calls === 2) throw new Error('start hook broke');
    },
    onTurnEnd: async (info) => {
      ends.push(info);
      if (info.kind === 'action') throw new Error('end hook rejected');
    },
  });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);

  const ok = await postJson(`${url}/bot-1/chat`, { message: 'hello' }, { 'x-request-id': 'req-1' });
  assert.equal(ok.status, 200);
  const failed = await postJson(`${url}/bot-1/chat`, { message: 'fail' });
  assert.equal(failed.status, 500);
  const invoked = await postJson(`${url}/bot-2/invoke`, { method: 'bump' });
  assert.equal(invoked.status, 200);
  await pollUntil(() => ends.length === 3 && logged.length >= 3, 2000);

  assert.deepEqual(starts.map((s) => [s.agentId, s.kind]), [['bot-1', 'chat'], ['bot-1', 'chat'], ['bot-2', 'chat']].map(([a, k], i) => [a, i === 2 ? 'action' : k]));
  assert.equal(starts[0]!.requestId, 'req-1');
  assert.equal(starts[0]!.turnId, ok.body.turn_id);
  const [done, fail, action] = ends;
  assert.equal(done!.outcome, 'done');
  assert.equal(done!.requestId, 'req-1');
  assert.deepEqual(done!.usage, { inputTokens: 3, outputTokens: 5 });
  assert.ok(done!.durationMs >= done!.queuedMs && done!.queuedMs >= 0);
  assert.equal(fail!.outcome, 'failed');
  assert.equal(fail!.code, 'internal_error');
  assert.equal(action!.kind, 'action');
  assert.equal(action!.outcome, 'done');
  assert.equal(starts[2]!.action, 'bump');
  assert.equal(action!.action, 'bump');
  assert.equal(done!.action, undefined, 'a chat turn names no action');
  const messages = logged.map((args) => String(args[0]));
  assert.ok(messages.includes('AgentRouter: a turn hook failed'), messages.join('\n'));
  // Records carry the request's fields.
  const failure = logged.find((args) => String(args[0]).startsWith('AgentRouter: request failed'));
  assert.equal((failure?.[2] as { requestId?: string }).requestId, failed.headers.get('x-request-id'));
});

test('turn hooks: a chat that pauses for approval ends paused; the approval turn ends done; an enveloped invoke names its action', async (t) => {
  class Payer extends Agent {
    static override actions = ['ping'];
    static override tools = { pay: { description: 'Pays', parameters: { type: 'object', properties: {} }, approval: true } };
    constructor(id: string) {
      super(id, {
        storage: new MemoryStorage(),
        model: {
          name: 'test:payer',
          async *stream(request) {
            if (request.messages.at(-1)?.role === 'tool') yield 'Paid.';
            else yield { toolCall: { id: 'p1', name: 'pay', arguments: '{}' } };
          },
        },
      });
    }
    pay() {
      return 'ok';
    }
    ping() {
      return 'pong';
    }
  }
  const r = new AgentRegistry();
  r.register('.*', Payer);
  const starts: TurnStartInfo[] = [];
  const ends: TurnEndInfo[] = [];
  const router = new AgentRouter(r, { logger: { error: () => {} }, onTurnStart: (info) => void starts.push(info), onTurnEnd: (info) => void ends.push(info) });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  const paused = await postJson(`${url}/p1/chat`, { message: 'pay' });
  assert.equal(paused.body.pending_approvals.length, 1);
  await pollUntil(() => ends.length === 1, 2000);
  assert.deepEqual([ends[0]!.kind, ends[0]!.outcome, ends[0]!.code], ['chat', 'paused', undefined]);
  const resumed = await postJson(`${url}/p1/approvals`, { decisions: [{ id: 'p1', approved: true }] });
  assert.equal(resumed.body.response, 'Paid.');
  await pollUntil(() => ends.length === 2, 2000);
  assert.equal(ends[1]!.outcome, 'done');
  // A typed stream that pauses is reported paused too.
  await (await fetch(`${url}/p2/chat?stream=events`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"message":"pay"}' })).text();
  await pollUntil(() => ends.length === 3, 2000);
  assert.equal(ends[2]!.outcome, 'paused');
  const enveloped = await postJson(`${url}/p3`, { action: 'invoke', payload: { method: 'ping' } });
  assert.equal(enveloped.body.result, 'pong');
  await pollUntil(() => ends.length === 4, 2000);
  assert.deepEqual([starts[3]!.action, ends[3]!.action, ends[3]!.kind], ['ping', 'ping', 'action']);
});

/** A router serving agents on `model` for the ids `pattern`, with metrics on and every onTurnEnd kept in `ends`. */
async function servedWithEnds(t: TestContext, pattern: string, model: Model, options: AgentRouterOptions = {}) {
  class Served extends Agent {
    constructor(id: string) {
      super(id, { model });
    }
  }
  const reg = new AgentRegistry();
  reg.register(pattern, Served);
  const ends: TurnEndInfo[] = [];
  const router = new AgentRouter(reg, { metrics: true, logger: { error: () => {} }, onTurnEnd: (info) => void ends.push(info), ...options });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  return { url, router, ends };
}

test('turn hooks and metrics: a streamed turn that fails or is left reports its code, as a JSON reply does', async (t) => {
  const limited: Model = {
    name: 'test:limited',
    async *stream(request) {
      const last = request.messages.at(-1) as { content: string };
      if (last.content === 'limit') throw new AgentRouterError(429, 'model_rate_limited', 'The provider is rate limiting', { expose: true });
      for (;;) {
        yield 'word ';
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    },
  };
  const { url, router, ends } = await servedWithEnds(t, 'lim-[0-9]+', limited);
  const json = await postJson(`${url}/lim-1/chat`, { message: 'limit' });
  assert.equal(json.status, 429);
  for (const [i, mode] of ['true', 'events', 'ui'].entries()) {
    await (await fetch(`${url}/lim-${i + 2}/chat?stream=${mode}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"message":"limit"}' })).text();
  }
  // A client that leaves a stream mid-turn: cancelled, with the code a JSON chat's leaving client gets.
  const left = new AbortController();
  const reader = (await fetch(`${url}/lim-9/chat?stream=true`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"message":"go"}', signal: left.signal })).body!.getReader();
  await reader.read();
  left.abort();
  await pollUntil(() => ends.length === 5, 2000);
  assert.deepEqual(ends.map((e) => [e.agentId, e.outcome, e.code]), [
    ['lim-1', 'failed', 'model_rate_limited'],
    ['lim-2', 'failed', 'model_rate_limited'],
    ['lim-3', 'failed', 'model_rate_limited'],
    ['lim-4', 'failed', 'model_rate_limited'],
    ['lim-9', 'cancelled', 'client_closed'],
  ]);
  const text = router.metrics();
  assert.match(text, /^agent_router_turns_total\{code="model_rate_limited",outcome="failed"\} 4$/m);
  assert.match(text, /^agent_router_turns_total\{code="client_closed",outcome="cancelled"\} 1$/m);
});

test('turn hooks and metrics: a turn cut by turnTimeout failed (code turn_timeout), JSON or streamed', async (t) => {
  const endless: Model = {
    name: 'test:endless',
    async *stream(request) {
      for (;;) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        if (request.signal.aborted) return;
        yield 'word ';
      }
    },
  };
  const { url, router, ends } = await servedWithEnds(t, 'slow-[0-9]+', endless, { turnTimeout: 0.2 });
  assert.equal((await postJson(`${url}/slow-1/chat`, { message: 'go' })).status, 504);
  await (await fetch(`${url}/slow-2/chat?stream=events`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"message":"go"}' })).text();
  await pollUntil(() => ends.length === 2, 2000);
  assert.deepEqual(ends.map((e) => [e.outcome, e.code]), [['failed', 'turn_timeout'], ['failed', 'turn_timeout']]);
  assert.match(router.metrics(), /^agent_router_turns_total\{code="turn_timeout",outcome="failed"\} 2$/m);
});

test('structured logs: a logger with child() (pino-shaped) gets error({err, request_id, agent_id, turn_id}, message)', async (t) => {
  const records: Array<[Record<string, unknown>, string]> = [];
  const pinoLike = { error: (obj: Record<string, unknown>, msg: string) => records.push([obj, msg]), child: () => pinoLike };
  const { url, close } = await listen(new AgentRouter(registry(), { logger: pinoLike as never }).toRequestListener());
  t.after(close);
  const reply = await postJson(`${url}/bot-3/chat`, { message: 'fail' }, { 'x-request-id': 'pino-1' });
  assert.equal(reply.status, 500);
  await pollUntil(() => records.length > 0, 2000);
  const [record, message] = records.at(-1)!;
  assert.match(message, /request failed with 500/);
  assert.equal(record['request_id'], 'pino-1');
  assert.equal(record['agent_id'], 'bot-3');
  assert.equal(typeof record['turn_id'], 'string');
  assert.equal((record['err'] as Error).message, 'model down');
});

test('structured logs: a failed stream (each mode) and a failed tool carry request_id, agent_id and turn_id too', async (t) => {
  const records: Array<[Record<string, unknown>, string]> = [];
  const pinoLike = { error: (obj: Record<string, unknown>, msg: string) => records.push([obj, msg]), child: () => pinoLike };
  const calls = (id: string) => ({ toolCall: { id, name: 'lookup', arguments: '{}' } });
  const toolModel: Model = {
    name: 'test:tool',
    async *stream(request) {
      if (request.messages.at(-1)?.role === 'tool') yield 'looked';
      else yield calls('c1');
    },
  };
  const reg = registry();
  class Looker extends Agent {
    constructor(id: string) {
      super(id, { model: toolModel, tools: { lookup: { description: 'Looks up', parameters: { type: 'object' }, run: () => Promise.reject(new Error('lookup down')) } } });
    }
  }
  reg.register('tool-[0-9]+', Looker);
  const { url, close } = await listen(new AgentRouter(reg, { logger: pinoLike as never }).toRequestListener());
  t.after(close);
  for (const [mode, id] of [['true', 'bot-4'], ['events', 'bot-5'], ['ui', 'bot-6'], ['events', 'tool-1']] as const) {
    const requestId = `pino-${mode}-${id}`;
    const res = await fetch(`${url}/${id}/chat?stream=${mode}`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-request-id': requestId }, body: '{"message":"fail"}' });
    const turnId = res.headers.get('turn-id');
    await res.text();
    await pollUntil(() => records.some(([record]) => record['request_id'] === requestId), 2000);
    const found = records.find(([each]) => each['request_id'] === requestId);
    assert.ok(found, `${mode} ${id}: no record with request_id; logged: ${JSON.stringify(records.map(([each, msg]) => [msg, Object.keys(each)]))}`);
    const [record, message] = found;
    assert.match(message, id.startsWith('tool') ? /tool lookup of agent "tool-1" failed/ : /stream for agent .* failed with 500/, `${mode} ${id}`);
    assert.equal(record['agent_id'], id);
    assert.equal(record['turn_id'], turnId);
    assert.equal((record['err'] as Error).message, id.startsWith('tool') ? 'lookup down' : 'model down');
  }
});

test('metrics: MetricsRegistry writes valid exposition text with escaped labels, buckets, sum and count', () => {
  const registry = new MetricsRegistry();
  registry.counter('c_total', 'A "counter"\nwith lines').inc({ path: 'a"b\\c\nd' }, 2);
  const h = registry.histogram('h_seconds', 'H', [0.1, 1]);
  h.observe(0.05);
  h.observe(5);
  registry.gauge('g', 'G', () => 7);
  const text = registry.text();
  assert.match(text, /^c_total\{path="a\\"b\\\\c\\nd"\} 2$/m);
  assert.match(text, /^h_seconds_bucket\{le="\+Inf"\} 2$/m);
  const parsed = parsePrometheusTextFormat(text) as Array<{ name: string; type: string; metrics: any[] }>;
  assert.deepEqual(parsed.map((m) => [m.name, m.type]), [['c_total', 'COUNTER'], ['h_seconds', 'HISTOGRAM'], ['g', 'GAUGE']]);
  assert.equal(parsed[0]!.metrics[0].labels.path, 'a"b\\c\nd');
  assert.deepEqual(parsed[1]!.metrics[0].buckets, { '0.1': '1', '1': '1', '+Inf': '2' });
  assert.equal(parsed[1]!.metrics[0].count, '2');
});

test('metrics: AgentServer serves GET /metrics (off by default) and the router exposes the same text', async (t) => {
  const off = await new AgentServer(registry(), { logger: { error: () => {} } }).serve(0);
  t.after(() => off.close());
  assert.equal((await fetch(`${off.url}/metrics`)).status, 404);
  assert.throws(() => off.router.metrics(), /metrics option/);

  const server = await new AgentServer(registry(), { metrics: true, logger: { error: () => {} } }).serve(0);
  t.after(() => server.close());
  await postJson(`${server.url}/agent/bot-1/chat`, { message: 'hi' });
  await postJson(`${server.url}/agent/bot-1/chat`, { message: 'fail' });
  await fetch(`${server.url}/agent/bot-2/chat?stream=true`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"message":"s"}' }).then((r) => r.text());

  const res = await fetch(`${server.url}/metrics`);
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'text/plain; version=0.0.4; charset=utf-8');
  assert.ok(res.headers.get('x-request-id'));
  const text = await res.text();
  const byName = new Map((parsePrometheusTextFormat(text) as Array<{ name: string; type: string; metrics: any[] }>).map((m) => [m.name, m]));
  const turns = byName.get('agent_router_turns_total')!;
  assert.equal(turns.type, 'COUNTER');
  const turnCount = (outcome: string) => turns.metrics.filter((m) => m.labels.outcome === outcome).reduce((n, m) => n + Number(m.value), 0);
  assert.equal(turnCount('done'), 2);
  assert.deepEqual(turns.metrics.find((m) => m.labels.outcome === 'failed').labels, { outcome: 'failed', code: 'internal_error' });
  assert.equal(byName.get('agent_router_turn_duration_seconds')!.metrics[0].count, '3');
  assert.equal(byName.get('agent_router_turn_queue_seconds')!.type, 'HISTOGRAM');
  const tokens = byName.get('agent_router_tokens_total')!.metrics;
  assert.equal(tokens.find((m) => m.labels.direction === 'input').value, '6');
  assert.equal(tokens.find((m) => m.labels.direction === 'output').value, '10');
  assert.equal(byName.get('agent_router_live_agents')!.metrics[0].value, '2');
  assert.equal(byName.get('agent_router_open_streams')!.metrics[0].value, '0');
  assert.equal(byName.get('agent_router_queued_turns')!.metrics[0].value, '0');
  const requests = byName.get('agent_router_http_requests_total')!.metrics;
  assert.deepEqual(requests.map((m) => [m.labels.route, m.labels.status, m.value]).sort(), [['chat', '200', '2'], ['chat', '500', '1']]);
  assert.equal(server.router.metrics().split('\n')[0], '# HELP agent_router_turns_total Turns ended, by outcome and error code.');
});

test('metrics: a queued turn is counted while it waits, and its queue wait observed', async (t) => {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const slow: Model = {
    name: 'test:slow',
    async *stream() {
      await gate;
      yield 'ok';
    },
  };
  const agent = new Agent('solo', { model: slow });
  const router = new AgentRouter(agent, { metrics: true, logger: { error: () => {} } });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  const first = postJson(`${url}/chat`, { message: 'a' });
  const second = postJson(`${url}/chat`, { message: 'b' });
  await pollUntil(() => /^agent_router_queued_turns 1$/m.test(router.metrics()), 2000);
  release();
  await Promise.all([first, second]);
  assert.match(router.metrics(), /^agent_router_queued_turns 0$/m);
  assert.match(router.metrics(), /^agent_router_turn_queue_seconds_count 2$/m);
});
