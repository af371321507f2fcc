// router.openapi() and the optional GET {prefix}/openapi.json: the document
// validates against the OpenAPI 3.1 schema (@seriousme/openapi-schema-validator)
// and lists exactly the routes the router answers.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Validator } from '@seriousme/openapi-schema-validator';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouter, type AgentRouterOptions } from '../../src/router/router.ts';
import type { OpenAPIDocument } from '../../src/router/openapi.ts';
import { echoModel } from '../../src/models/echo.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { listen } from '../helpers/listen.ts';
import { collectSSE } from '../helpers/sse.ts';

/** Every error status DESIGN.md section 3 lists, and the README's 409 (storage refused the turn). */
const ERROR_STATUSES = ['400', '401', '403', '404', '405', '409', '413', '415', '429', '500', '501', '502', '503', '504'];

function registryRouter(options: AgentRouterOptions = {}): AgentRouter {
  const storage = new MemoryStorage();
  class Counter extends Agent<{ count: number }> {
    static override actions = ['increment'];
    constructor(id: string) {
      super(id, { model: echoModel(), initialState: { count: 0 }, storage });
    }
    async increment(): Promise<number> {
      await this.setState({ count: this.state.count + 1 });
      return this.state.count;
    }
  }
  const registry = new AgentRegistry();
  registry.register('counter-[0-9]+', Counter);
  return new AgentRouter(registry, options);
}

function singleRouter(options: AgentRouterOptions = {}): AgentRouter {
  return new AgentRouter(new Agent('bot', { model: echoModel(), storage: new MemoryStorage() }), options);
}

async function assertValid(doc: OpenAPIDocument): Promise<void> {
  const validator = new Validator();
  const result = await validator.validate(doc as unknown as Record<string, unknown>);
  assert.equal(result.valid, true, JSON.stringify(result.errors, null, 2));
  assert.equal(validator.version, '3.1');
}

/** `[method, path]` pairs of a document, e.g. `['post', '/agents/{agent_id}/chat']`. */
function operations(doc: OpenAPIDocument): Array<[string, string]> {
  return Object.entries(doc.paths).flatMap(([path, item]) => Object.keys(item).map((method): [string, string] => [method, path]));
}

type Operation = OpenAPIDocument['paths'][string][string];
type Response = { description: string; content?: Record<string, { schema: { $ref?: string } }>; headers?: Record<string, unknown> };

test('a registry router\'s document validates as OpenAPI 3.1 and lists every route under the prefix', async () => {
  const doc = registryRouter({ prefix: '/agents', tags: ['agents'] }).openapi();
  await assertValid(doc);
  assert.equal(doc.openapi, '3.1.0');
  assert.deepEqual(operations(doc).sort(), [
    ['get', '/agents/{agent_id}/approvals'],
    ['get', '/agents/{agent_id}/state'],
    ['get', '/agents/{agent_id}/turns/{turn_id}/events'],
    ['post', '/agents/{agent_id}'],
    ['post', '/agents/{agent_id}/approvals'],
    ['post', '/agents/{agent_id}/cancel'],
    ['post', '/agents/{agent_id}/chat'],
    ['post', '/agents/{agent_id}/invoke'],
  ]);
  assert.deepEqual(doc.tags, [{ name: 'agents' }]);
  for (const [method, path] of operations(doc)) {
    const op = doc.paths[path]?.[method] as Operation;
    assert.deepEqual(op.tags, ['agents'], `${method} ${path} tags`);
    const statuses = Object.keys(op.responses);
    const expected = method === 'get' ? ERROR_STATUSES.filter((s) => !['409', '413', '415', '501'].includes(s)) : ERROR_STATUSES;
    for (const status of expected) {
      const response = op.responses[status] as Response;
      assert.ok(response !== undefined, `${method} ${path} documents ${status} (has ${statuses.join(', ')})`);
      assert.equal(response.content?.['application/json']?.schema.$ref, '#/components/schemas/Error');
    }
    const id = (op.parameters as Array<{ name: string; in: string; required: boolean }>).find((p) => p.name === 'agent_id');
    assert.deepEqual({ in: id?.in, required: id?.required }, { in: 'path', required: true });
  }
  assert.deepEqual(doc.components.schemas['Error']?.['required'], ['error', 'code']);
});

test('chat and the generic route document the SSE reply and the stream parameter', () => {
  const doc = registryRouter().openapi();
  for (const path of ['/{agent_id}/chat', '/{agent_id}']) {
    const op = doc.paths[path]?.['post'] as Operation;
    const ok = op.responses['200'] as Response;
    assert.deepEqual(Object.keys(ok.content ?? {}), ['application/json', 'text/event-stream']);
    assert.ok((op.parameters as Array<{ name: string }>).some((p) => p.name === 'stream'));
  }
  const invoke = doc.paths['/{agent_id}/invoke']?.['post'] as Operation;
  assert.deepEqual(Object.keys((invoke.responses['200'] as Response).content ?? {}), ['application/json']);
  const wrongMethod = invoke.responses['405'] as Response;
  assert.ok(wrongMethod.headers?.['Allow'] !== undefined, '405 documents Allow');
});

test('the SSE reply\'s description names every event a stream sends, and the fields of the typed ones (stream=events)', async (t) => {
  const router = registryRouter();
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  const ok = ((router.openapi().paths['/{agent_id}/chat']?.['post'] as Operation).responses['200'] as Response).content?.['text/event-stream'];
  const description = (ok?.schema as { description: string }).description;
  const named: string[] = [];
  for (const stream of ['true', 'events']) {
    const res = await fetch(`${url}/counter-1/chat?stream=${stream}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"message":"hi there"}' });
    for (const { event, data } of (await collectSSE(res)).events) {
      if (event === 'message') continue;
      named.push(event);
      assert.ok(description.includes(`\`event: ${event}\``) || description.includes(`\`${event}\``), `the description names ${event}: ${description}`);
      if (stream !== 'events') continue;
      for (const field of Object.keys(JSON.parse(data) as object)) assert.ok(description.includes(`"${field}"`), `the description names ${event}'s ${field}`);
    }
  }
  assert.deepEqual(named, ['done', 'turn.started', 'text.delta', 'text.delta', 'turn.finished']);
});

test('a single-agent router\'s document: /chat, /invoke, /state and / ; no 429 (no pool)', async () => {
  const doc = singleRouter().openapi();
  await assertValid(doc);
  assert.deepEqual(operations(doc).sort(), [['get', '/approvals'], ['get', '/state'], ['get', '/turns/{turn_id}/events'], ['post', '/'], ['post', '/approvals'], ['post', '/cancel'], ['post', '/chat'], ['post', '/invoke']]);
  assert.equal(doc.tags, undefined);
  assert.match(doc.info.title, /bot/);
  for (const [method, path] of operations(doc)) {
    const op = doc.paths[path]?.[method] as Operation;
    assert.equal(op.responses['429'], undefined);
    assert.equal(op.tags, undefined);
    assert.equal(op.parameters?.some((p) => (p as { name: string }).name === 'agent_id') ?? false, false);
  }
  const prefixed = singleRouter({ prefix: '/bot' }).openapi();
  assert.deepEqual(Object.keys(prefixed.paths).sort(), ['/bot', '/bot/approvals', '/bot/cancel', '/bot/chat', '/bot/invoke', '/bot/state', '/bot/turns/{turn_id}/events']);
});

test('the responses option is merged into every operation: a description overrides ours, the schema stays; new statuses are added', async () => {
  const doc = registryRouter({
    tags: ['a', 'b'],
    responses: { '401': { description: 'Send a bearer token' }, '418': { description: "I'm a teapot" } },
  }).openapi();
  await assertValid(doc);
  for (const [method, path] of operations(doc)) {
    const op = doc.paths[path]?.[method] as Operation;
    const unauthorized = op.responses['401'] as Response;
    assert.equal(unauthorized.description, 'Send a bearer token');
    assert.equal(unauthorized.content?.['application/json']?.schema.$ref, '#/components/schemas/Error');
    assert.deepEqual(op.responses['418'], { description: "I'm a teapot" });
    assert.deepEqual(op.tags, ['a', 'b']);
  }
});

test('operation ids are unique and carry the prefix', () => {
  const doc = registryRouter({ prefix: '/api/v1' }).openapi();
  const ids = operations(doc).map(([method, path]) => (doc.paths[path]?.[method] as Operation).operationId);
  assert.deepEqual(ids.sort(), ['apiV1Approvals', 'apiV1Approve', 'apiV1Cancel', 'apiV1Chat', 'apiV1Invoke', 'apiV1Request', 'apiV1State', 'apiV1TurnEvents']);
});

/** A validator for one of the document's schemas (JSON Schema 2020-12, as OpenAPI 3.1's are). */
function schemaValidator(doc: OpenAPIDocument, name: string): (value: unknown) => boolean {
  const ajv = new Ajv2020({ strict: false });
  ajv.addSchema({ $id: 'doc', components: doc.components });
  const validate = ajv.compile({ $ref: `doc#/components/schemas/${name}` });
  return (value) => validate(value) === true;
}

test('the schemas take every body the README documents, and type open objects as open (for client generators)', async (t) => {
  const doc = registryRouter().openapi();
  const invoke = schemaValidator(doc, 'InvokeRequest');
  for (const params of [{ by: 2 }, [1, 2], null, 5, 'text', true]) {
    assert.ok(invoke({ method: 'increment', params }), `params ${JSON.stringify(params)}`);
    assert.ok(invoke({ payload: { method: 'increment', params } }), `wrapped params ${JSON.stringify(params)}`);
  }
  assert.ok(invoke({ method: 'increment' }));
  assert.ok(!invoke({ params: {} }), 'a call names its method');

  const generic = schemaValidator(doc, 'GenericRequest');
  for (const body of [{ message: 'hi' }, { action: 'chat', message: 'hi' }, { action: 'invoke', payload: { method: 'increment', params: { by: 2 } } }, { action: 'state' }]) {
    assert.ok(generic(body), JSON.stringify(body));
  }

  // A state with keys, as the server answers it, fits StateResponse.
  const { url, close } = await listen(registryRouter().toRequestListener());
  t.after(close);
  const state = await (await fetch(`${url}/counter-1/state`)).json();
  assert.deepEqual(state, { agent_id: 'counter-1', state: { count: 0 } });
  assert.ok(schemaValidator(doc, 'StateResponse')(state));

  // openapi-typescript reads `{type: object}` with no properties as Record<string, never>: every such schema says it is open.
  const closedObjects: string[] = [];
  const walk = (node: unknown, where: string): void => {
    if (typeof node !== 'object' || node === null) return;
    const schema = node as Record<string, unknown>;
    if (schema['type'] === 'object' && schema['properties'] === undefined && schema['additionalProperties'] === undefined) closedObjects.push(where);
    for (const [key, value] of Object.entries(schema)) walk(value, `${where}/${key}`);
  };
  walk(doc.components.schemas, '#/components/schemas');
  assert.deepEqual(closedObjects, []);
});

test('every documented operation is answered by the router, with a reply of the documented shape', async (t) => {
  const router = registryRouter({ prefix: '/agents' });
  const { url, close } = await listen(router.toRequestListener());
  t.after(close);
  const doc = router.openapi();
  const bodies: Record<string, unknown> = { ChatRequest: { message: 'hi' }, InvokeRequest: { method: 'increment' }, GenericRequest: { action: 'state' } };
  for (const [method, path] of operations(doc)) {
    // A rejoin or a cancel needs a turn, a decision a paused one: turns-rejoin, turns-control and router-approvals test them.
    if (path.includes('{turn_id}') || path.endsWith('/cancel') || (path.endsWith('/approvals') && method === 'post')) continue;
    const op = doc.paths[path]?.[method] as Operation;
    const requestRef = (op.requestBody as { content: Record<string, { schema: { $ref: string } }> } | undefined)?.content['application/json']?.schema.$ref;
    const body = requestRef === undefined ? undefined : JSON.stringify(bodies[requestRef.split('/').at(-1) as string]);
    const res = await fetch(`${url}${path.replace('{agent_id}', 'counter-1')}`, {
      method: method.toUpperCase(),
      ...(body === undefined ? {} : { body, headers: { 'content-type': 'application/json' } }),
    });
    assert.equal(res.status, 200, `${method} ${path}`);
    const reply = (await res.json()) as Record<string, unknown>;
    const replyRef = ((op.responses['200'] as Response).content?.['application/json']?.schema.$ref as string).split('/').at(-1) as string;
    const schema = doc.components.schemas[replyRef] as { required?: string[]; oneOf?: Array<{ $ref: string }> };
    const candidates = schema.oneOf?.map((s) => doc.components.schemas[s.$ref.split('/').at(-1) as string] as { required: string[] }) ?? [schema as { required: string[] }];
    assert.ok(
      candidates.some((c) => JSON.stringify(Object.keys(reply).sort()) === JSON.stringify([...c.required].sort())),
      `${method} ${path} replied ${JSON.stringify(reply)}`,
    );
  }
});

test('openapi.json is off by default, served at GET {prefix}/openapi.json with openapi: true, and documented then', async (t) => {
  const off = await listen(registryRouter({ prefix: '/agents' }).toRequestListener());
  t.after(off.close);
  const offRes = await fetch(`${off.url}/agents/openapi.json`);
  assert.equal(offRes.status, 405, 'off: it is the generic route of an agent named "openapi.json", which takes POST');
  await offRes.body?.cancel();

  const offSingle = await listen(singleRouter().toRequestListener());
  t.after(offSingle.close);
  const offSingleRes = await fetch(`${offSingle.url}/openapi.json`);
  assert.equal(offSingleRes.status, 404);
  await offSingleRes.body?.cancel();

  const router = registryRouter({ prefix: '/agents', openapi: true });
  const on = await listen(router.toRequestListener());
  t.after(on.close);
  const res = await fetch(`${on.url}/agents/openapi.json`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
  const served = (await res.json()) as OpenAPIDocument;
  assert.deepEqual(served, router.openapi());
  assert.ok(served.paths['/agents/openapi.json']?.['get'] !== undefined);
  await assertValid(served);
});

test('openapi.json follows the cors option (a docs page on another origin reads it) and names its methods in a 405', async (t) => {
  const origin = 'http://docs.example';
  const registry = await listen(registryRouter({ prefix: '/agents', openapi: true, cors: { origins: [origin] } }).toRequestListener());
  t.after(registry.close);
  const url = `${registry.url}/agents/openapi.json`;

  const read = await fetch(url, { headers: { origin } });
  assert.equal(read.status, 200);
  assert.equal(read.headers.get('access-control-allow-origin'), origin);
  await read.body?.cancel();

  // A GET carrying a token is preflighted: the answer must allow GET, not only the generic route's POST.
  const preflight = await fetch(url, { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization' } });
  assert.equal(preflight.status, 204);
  assert.equal(preflight.headers.get('access-control-allow-origin'), origin);
  assert.match(preflight.headers.get('access-control-allow-methods') ?? '', /\bGET\b/);

  const refusedOrigin = await fetch(url, { headers: { origin: 'http://elsewhere.example' } });
  assert.equal(refusedOrigin.status, 200);
  assert.equal(refusedOrigin.headers.get('access-control-allow-origin'), null);
  await refusedOrigin.body?.cancel();

  const wrong = await fetch(url, { method: 'DELETE' });
  assert.equal(wrong.status, 405);
  assert.equal(wrong.headers.get('allow'), 'GET, HEAD, POST', 'POST there is still the generic route of an agent named "openapi.json"');
  assert.equal(((await wrong.json()) as { code: string }).code, 'method_not_allowed');

  const envelope = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"action":"state"}' });
  assert.equal(envelope.status, 404, 'the generic route, looking up an agent named "openapi.json" (no pattern takes it)');
  assert.equal(((await envelope.json()) as { code: string }).code, 'agent_not_found');

  const single = await listen(singleRouter({ openapi: true }).toRequestListener());
  t.after(single.close);
  const singleWrong = await fetch(`${single.url}/openapi.json`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
  assert.equal(singleWrong.status, 405);
  assert.equal(singleWrong.headers.get('allow'), 'GET, HEAD');
  await singleWrong.body?.cancel();
});

test('each call returns a fresh document, so a caller may change it', () => {
  const router = registryRouter({ tags: ['t'], responses: { '401': { description: 'x' } } });
  const first = router.openapi();
  first.info.title = 'Changed';
  (first.components.schemas['Error'] as Record<string, unknown>)['required'] = [];
  ((first.paths['/{agent_id}/chat']?.['post'] as Operation).tags as string[]).push('more');
  const second = router.openapi();
  assert.equal(second.info.title, 'agent-router');
  assert.deepEqual(second.components.schemas['Error']?.['required'], ['error', 'code']);
  assert.deepEqual((second.paths['/{agent_id}/chat']?.['post'] as Operation).tags, ['t']);
});
