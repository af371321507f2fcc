/**
 * The OpenAPI 3.1 document of one AgentRouter: its routes under its prefix
 * (docs/reference/http-api.md, "Routes"), the JSON request and reply bodies and the SSE reply
 * (section 3), and the `{"error", "code"}` answer for every error status.
 */
import { ON_DISCONNECT, WHEN_BUSY } from '../types.ts';

/** What the builder needs to know about a router. */
export interface OpenAPIRouterInfo {
  /** The router's normalized prefix ('' or '/agents'). */
  prefix: string;
  /** A single-agent router's agent id; undefined for a registry router. */
  agentId?: string | undefined;
  /** Longest agent id, for the `{agent_id}` parameter's schema. @defaultValue 256 */
  maxIdLength?: number | undefined;
  /** Whether `{prefix}/openapi.json` is served (and so documented). */
  servesDocument?: boolean | undefined;
  /** Tags for every operation (the router's `tags` option). */
  tags?: readonly string[] | undefined;
  /** Extra or overriding responses by status for every operation (the router's `responses` option). */
  responses?: Readonly<Record<string, object>> | undefined;
  /** The router's maxQueue: a finite one can answer a turn 429 `queue_full`. @defaultValue Infinity */
  maxQueue?: number | undefined;
}

/** An OpenAPI 3.1 document; plain JSON, a fresh object on every call (change it freely, e.g. `info.title`). */
export interface OpenAPIDocument {
  openapi: '3.1.0';
  info: { title: string; version: string; description?: string };
  /** The host's mount path (`[{ url: '/api' }]`) in a served document, which knows it from the request; `openapi()` cannot: add your own. */
  servers?: Array<{ url: string; description?: string }>;
  tags?: Array<{ name: string }>;
  paths: Record<string, Record<string, OpenAPIOperation>>;
  components: { schemas: Record<string, Schema> };
}

export interface OpenAPIOperation {
  operationId: string;
  summary: string;
  tags?: string[];
  parameters?: object[];
  requestBody?: object;
  responses: Record<string, object>;
}

/** A JSON Schema object, as OpenAPI 3.1 holds them. */
export type Schema = Record<string, unknown>;

const ref = (name: string): Schema => ({ $ref: `#/components/schemas/${name}` });
const json = (schema: Schema): object => ({ 'application/json': { schema } });

/** The turn a JSON reply answers, as in its `Turn-Id` header. */
const TURN_ID = { type: 'string', description: 'The turn, as in the `Turn-Id` header (absent only behind a transport of your own that sends none).' };
const PENDING: Schema = {
  type: 'array',
  description: 'Tool calls waiting for a decision (POST .../approvals).',
  items: { type: 'object', required: ['id', 'name', 'arguments'], properties: { id: { type: 'string' }, name: { type: 'string' }, arguments: {} } },
};

const SCHEMAS: Record<string, Schema> = {
  ApprovalsRequest: {
    type: 'object',
    required: ['decisions'],
    properties: {
      decisions: {
        type: 'array',
        minItems: 1,
        items: { type: 'object', required: ['id', 'approved'], properties: { id: { type: 'string' }, approved: { type: 'boolean' }, reason: { type: 'string', description: 'Told to the model when refused.' } } },
      },
    },
  },
  ApprovalsResponse: { type: 'object', required: ['agent_id', 'pending_approvals'], properties: { agent_id: { type: 'string' }, pending_approvals: PENDING } },
  ChatRequest: {
    type: 'object',
    required: ['message'],
    properties: { message: { type: 'string', minLength: 1, description: 'The user message.' } },
  },
  ChatResponse: {
    type: 'object',
    required: ['agent_id', 'turn_id', 'response'],
    properties: {
      agent_id: { type: 'string' },
      turn_id: TURN_ID,
      response: { type: 'string', description: 'The reply (all of it, unless truncated says the provider cut it short).' },
      truncated: { type: 'boolean', const: true, description: "Present when the model's provider cut the reply short at its token limit." },
      tool_calls: { type: 'array', items: ref('ToolCallRecord'), description: 'Present when the turn called tools: each call in order, with its result or error.' },
      pending_approvals: { ...PENDING, description: 'Present when the turn paused: the calls waiting for a decision (POST .../approvals).' },
    },
  },
  ToolCallRecord: {
    type: 'object',
    required: ['id', 'name', 'arguments'],
    properties: {
      id: { type: 'string' },
      name: { type: 'string' },
      arguments: { description: 'The arguments the model wrote: a JSON object, or the raw text as a string when it is not one.' },
      result: { description: "The tool's result (any JSON value); absent when `error` is present." },
      error: ref('ToolError'),
    },
  },
  ToolError: {
    type: 'object',
    required: ['message', 'code'],
    properties: {
      message: { type: 'string', description: 'What the model was told.' },
      code: { type: 'string', description: 'invalid_tool_arguments, unknown_tool, tool_failed, tool_result_not_json, or the code of an error the tool marked safe to show.' },
    },
  },
  ToolCallEvent: {
    type: 'object',
    required: ['type', 'id', 'name', 'arguments'],
    description: 'Typed stream event `tool.call`: the model called a tool.',
    properties: { type: { const: 'tool.call' }, id: { type: 'string' }, name: { type: 'string' }, arguments: { description: 'As in ToolCallRecord.' } },
  },
  ToolResultEvent: {
    type: 'object',
    required: ['type', 'id', 'name'],
    description: 'Typed stream event `tool.result`: the outcome of the call with the same id; `result` or `error`.',
    properties: { type: { const: 'tool.result' }, id: { type: 'string' }, name: { type: 'string' }, result: {}, error: ref('ToolError') },
  },
  InvokeCall: {
    type: 'object',
    required: ['method'],
    properties: {
      method: { type: 'string', minLength: 1, description: "One of the agent class's static `actions`." },
      params: {
        // No type: any JSON value is taken, and a generator given `type: object` alone would type it as an empty record.
        description: 'An object is passed as the single argument, an array is spread as positional arguments, absent or null means none, and any other value is the single argument.',
      },
    },
  },
  InvokeRequest: {
    description: 'The call bare, or wrapped as `{"payload": {...}}`.',
    oneOf: [ref('InvokeCall'), { type: 'object', required: ['payload'], properties: { payload: ref('InvokeCall') } }],
  },
  InvokeResponse: {
    type: 'object',
    required: ['agent_id', 'turn_id', 'result'],
    properties: {
      agent_id: { type: 'string' },
      turn_id: TURN_ID,
      result: { description: "The action's return value (null for none)." },
    },
  },
  CancelRequest: {
    type: 'object',
    properties: { turn_id: { type: 'string', description: 'The turn to cancel (its `Turn-Id`), running or queued; absent: the running turn.' } },
  },
  CancelResponse: {
    type: 'object',
    required: ['agent_id', 'turn_id', 'cancelled'],
    properties: { agent_id: { type: 'string' }, turn_id: { type: 'string' }, cancelled: { type: 'boolean', const: true } },
  },
  StateResponse: {
    type: 'object',
    required: ['agent_id', 'state'],
    properties: { agent_id: { type: 'string' }, state: { type: 'object', additionalProperties: true, description: "The agent's committed state." } },
  },
  GenericRequest: {
    description: 'The action envelope; the default action is chat.',
    oneOf: [
      { type: 'object', required: ['message'], properties: { action: { const: 'chat' }, message: { type: 'string', minLength: 1 } } },
      { type: 'object', required: ['action'], properties: { action: { const: 'invoke' }, payload: ref('InvokeCall') } },
      { type: 'object', required: ['action'], properties: { action: { const: 'state' } } },
    ],
  },
  GenericResponse: { oneOf: [ref('ChatResponse'), ref('InvokeResponse'), ref('StateResponse')] },
  Error: {
    type: 'object',
    required: ['error', 'code'],
    properties: {
      error: { type: 'string', description: 'What went wrong, for people (5xx: a generic message).' },
      code: { type: 'string', description: 'A stable snake_case code, for programs.' },
    },
  },
};

const EVENT_STREAM = {
  'text/event-stream': {
    schema: {
      type: 'string',
      description:
        'Server-Sent Events: one `data:` event per chunk of the reply, then `event: done` + `data: [DONE]`; ' +
        'a failure after the stream began ends it with `event: error` + `data: {"error", "code"}`; `: ping` comments keep an idle stream open. ' +
        'Every event carries `id: <turn_id>:<seq>` (seq from 1; the `Turn-Id` header names the turn). ' +
        // What a client of stream=events parses; the document had only the plain stream's shape.
        'With `stream=events`, typed JSON events whose `type` is the event name: `turn.started` (`{"type", "agent_id", "turn_id"}`), `text.delta` (`{"type", "text"}`), ' +
        'then `turn.finished` (`{"type", "result": {"agent_id", "text"}}`, `"truncated": true` in `result` when the provider cut the reply short) or `turn.failed` (`{"type", "error", "code"}`). ' +
        'A turn that calls tools sends `tool.call` (`{"type", "id", "name", "arguments"}`, schema ToolCallEvent) and `tool.result` (`{"type", "id", "name", "result"}` or `{..., "error": {"message", "code"}}`, schema ToolResultEvent) in order between the `text.delta` events; the plain stream sends only text, though its `id:` seq counts the tool events too. ' +
        'With `stream=ui`, the AI SDK UI message stream v1 (header `x-vercel-ai-ui-message-stream: v1`): `data:` JSON parts, no ids, ending `data: [DONE]`.',
    },
    example: 'data: Hello\n\ndata:  world\n\nevent: done\ndata: [DONE]\n\n',
  },
};

const header = (description: string): object => ({ description, schema: { type: 'string' } });

/** Every error status of docs/reference/http-api.md, "Errors", with when it happens and an example. */
const ERRORS: Record<string, { description: string; example: { error: string; code: string }; headers?: object }> = {
  '400': { description: 'Invalid JSON body, `message` missing or not a string, bad agent id, unknown action', example: { error: 'Invalid JSON body', code: 'invalid_json' } },
  '401': { description: 'The authorize hook refused the request', example: { error: 'Unauthorized', code: 'unauthorized' }, headers: { 'WWW-Authenticate': header('Bearer') } },
  '403': { description: 'The authorize hook refused the request', example: { error: 'Forbidden', code: 'forbidden' } },
  '404': { description: 'No registry pattern matches the agent id, or unknown invoke method', example: { error: 'AgentRegistry: no pattern matches agent id "x"', code: 'agent_not_found' } },
  '405': { description: 'Wrong method on a known path', example: { error: 'Method not allowed; use POST', code: 'method_not_allowed' }, headers: { Allow: header('The method the path takes') } },
  '409': { description: 'Storage refused the turn: another process committed first (version_conflict), or the turn lost its storage lock (lock_lost); a retry runs on the newer state. An action may also answer a 409 of its own', example: { error: 'Request failed', code: 'version_conflict' } },
  '413': { description: 'Request body over the limit (default 1 MiB), or a gateway before a remote target refused it as too large (upstream_body_too_large)', example: { error: 'Request body is larger than the limit of 1048576 bytes', code: 'body_too_large' } },
  '415': { description: 'The declared content type is not JSON', example: { error: 'Content-Type "text/plain" is not supported; send JSON with Content-Type: application/json', code: 'unsupported_media_type' } },
  '429': { description: 'maxAgents live agents, none idle enough to evict, or a gateway before a remote target is rate limiting (upstream_rate_limited)', example: { error: 'All 1000 live agents are busy; retry shortly', code: 'too_many_agents' }, headers: { 'Retry-After': header('Seconds to wait') } },
  '500': { description: "An agent or action threw, or storage refused a statement or holds a damaged record (details only in the server log); or the model was still calling tools after the agent's maxSteps (max_steps_exceeded)", example: { error: 'Internal error', code: 'internal_error' } },
  '501': { description: 'A Transfer-Encoding other than chunked (such as gzip, chunked); or approvals for an agent behind a transport of your own, not HTTPTransport (not_implemented)', example: { error: 'Transfer-Encoding "gzip, chunked" is not supported; send the body with chunked alone, or with a Content-Length', code: 'unsupported_transfer_encoding' } },
  '502': { description: 'A remote target or the model provider failed', example: { error: 'The remote agent could not be reached', code: 'upstream_unreachable' } },
  '503': { description: 'The server is shutting down or at its stream cap, the agent\'s storage cannot be reached (storage_unavailable), or a remote target is unavailable for now (with Retry-After when known)', example: { error: 'Server is shutting down', code: 'shutting_down' }, headers: { 'Retry-After': header('Seconds to wait, when known') } },
  '504': { description: 'The turn (or a state read waiting on storage), a remote target or the model provider timed out', example: { error: "The turn did not complete within 300 s (waiting behind the agent's earlier turns included)", code: 'turn_timeout' } },
};

/** Only a request with a body (a turn: chat, invoke, the generic envelope) can get these; GET state cannot. */
const BODY_STATUSES = new Set(['409', '413', '415', '501']);

/** The routes that start a turn, so whenBusy and maxQueue apply. */
const TURN_ROUTES = new Set(['chat', 'invoke', 'request']);
const RETRY_AFTER = { 'Retry-After': header('Seconds to wait (a hint)') };

interface RouteSpec {
  name: string;
  method: 'get' | 'post';
  path: string;
  summary: string;
  request?: string;
  reply: string;
  streams?: boolean;
  /** Statuses of BODY_STATUSES this route answers though it takes no body. */
  bodiless?: readonly string[];
}

/** Builds the router's OpenAPI 3.1 document. */
export function buildOpenAPI(info: OpenAPIRouterInfo): OpenAPIDocument {
  const registry = info.agentId === undefined;
  const base = registry ? `${info.prefix}/{agent_id}` : info.prefix;
  const who = registry ? 'the agent `{agent_id}`' : `the agent ${JSON.stringify(info.agentId)}`;
  const routes: RouteSpec[] = [
    { name: 'chat', method: 'post', path: `${base}/chat`, summary: `Chat with ${who}`, request: 'ChatRequest', reply: 'ChatResponse', streams: true },
    { name: 'invoke', method: 'post', path: `${base}/invoke`, summary: `Call an action of ${who}`, request: 'InvokeRequest', reply: 'InvokeResponse' },
    { name: 'state', method: 'get', path: `${base}/state`, summary: `The state of ${who}`, reply: 'StateResponse' },
    { name: 'approvals', method: 'get', path: `${base}/approvals`, summary: `The tool calls a paused turn of ${who} waits on`, reply: 'ApprovalsResponse', bodiless: ['501'] },
    { name: 'approve', method: 'post', path: `${base}/approvals`, summary: `Decide the paused calls of ${who} and resume its turn`, request: 'ApprovalsRequest', reply: 'ChatResponse', streams: true },
    { name: 'request', method: 'post', path: base === '' ? '/' : base, summary: `Generic request (action envelope) to ${who}`, request: 'GenericRequest', reply: 'GenericResponse', streams: true },
  ];
  const paths: OpenAPIDocument['paths'] = {};
  for (const route of routes) (paths[route.path] ??= {})[route.method] = operation(route, info, registry);
  paths[`${base}/turns/{turn_id}/events`] = { get: rejoinOperation(info, registry, base) };
  paths[`${base}/cancel`] = { post: cancelOperation(info, registry, base) };
  if (info.servesDocument === true) {
    paths[`${info.prefix}/openapi.json`] = {
      get: withOptions(info, {
        operationId: operationId(info.prefix, 'openapi'),
        summary: 'This OpenAPI document',
        responses: { '200': { description: 'The OpenAPI 3.1 document', content: json({ type: 'object' }) } },
      }),
    };
  }
  const tags = info.tags ?? [];
  return {
    openapi: '3.1.0',
    info: {
      title: registry ? 'agent-router' : `agent-router: ${info.agentId}`,
      version: '1.0.0',
      description: 'Conversational agents over HTTP. Errors are always JSON `{"error", "code"}`.',
    },
    ...(tags.length > 0 ? { tags: tags.map((name) => ({ name })) } : {}),
    paths,
    components: { schemas: structuredClone(SCHEMAS) },
  };
}

function operation(route: RouteSpec, info: OpenAPIRouterInfo, registry: boolean): OpenAPIOperation {
  const parameters: object[] = [];
  if (registry) {
    parameters.push({
      name: 'agent_id',
      in: 'path',
      required: true,
      description: 'One path segment, percent-decoded once; matched against the registry patterns.',
      schema: { type: 'string', minLength: 1, maxLength: info.maxIdLength ?? 256 },
    });
  }
  if (route.streams === true) {
    parameters.push({
      name: 'stream',
      in: 'query',
      required: false,
      description:
        'Stream the reply as Server-Sent Events: `true`, `1`, `yes`, `on` (any case) stream; `false`, `0`, `no`, `off` do not; ' +
        'absent, a request whose `Accept` is only `text/event-stream` streams. `events` streams typed events; `ui` the AI SDK UI message stream (v1).',
      schema: { type: 'string', examples: ['true', 'false'] },
    });
  }
  const turn = TURN_ROUTES.has(route.name);
  if (turn) {
    parameters.push({
      name: 'when_busy',
      in: 'query',
      required: false,
      description: 'When the agent runs or queues a turn (here, or in another process sharing its storage with shareTurns): `enqueue` waits, `reject` answers 409 `agent_busy`, `interrupt` cancels the turns ahead and runs. Absent: the router\'s `whenBusy`.',
      schema: { type: 'string', enum: [...WHEN_BUSY] },
    });
  }
  if (turn || route.name === 'approve') {
    parameters.push({
      name: 'on_disconnect',
      in: 'query',
      required: false,
      description: 'When the client leaves before the turn ends: `cancel` cuts it (it stores nothing), `continue` lets it run to its end and commit (a stream can be rejoined by its Turn-Id). Absent: the router\'s `onDisconnect`.',
      schema: { type: 'string', enum: [...ON_DISCONNECT] },
    });
  }
  const ok = { description: 'OK', content: route.streams === true ? { ...json(ref(route.reply)), ...EVENT_STREAM } : json(ref(route.reply)) };
  const responses: Record<string, object> = { '200': ok };
  for (const status in ERRORS) {
    if (route.request === undefined && BODY_STATUSES.has(status) && route.bodiless?.includes(status) !== true) continue;
    if (!registry && status === '429' && !(turn && (info.maxQueue ?? Infinity) !== Infinity)) continue;
    const error = ERRORS[status] as (typeof ERRORS)[string];
    responses[status] = {
      description: error.description,
      ...(error.headers === undefined ? {} : { headers: error.headers }),
      content: { 'application/json': { schema: ref('Error'), example: error.example } },
    };
  }
  if (turn) busyResponses(responses, registry);
  return withOptions(info, {
    operationId: operationId(info.prefix, route.name),
    summary: route.summary,
    ...(parameters.length > 0 ? { parameters } : {}),
    ...(route.request === undefined ? {} : { requestBody: { required: true, content: json(ref(route.request)) } }),
    responses,
  });
}

/** A turn's 409 `agent_busy` and 429 `queue_full` (whenBusy, maxQueue), both with Retry-After. */
function busyResponses(responses: Record<string, object>, registry: boolean): void {
  const conflict = responses['409'] as { description: string };
  const busy = '; or, under whenBusy `reject`, the agent runs or queues a turn (agent_busy, with Retry-After)';
  responses['409'] = { ...conflict, description: conflict.description + busy, headers: RETRY_AFTER };
  const full = responses['429'] as { description: string } | undefined;
  if (full === undefined) return;
  const queue = 'maxQueue turns already wait for the agent (queue_full, with Retry-After)';
  responses['429'] = { ...full, description: registry ? `${full.description}, or ${queue}` : queue };
}

/** `GET .../turns/{turn_id}/events`: a streamed turn's events again, then the live ones. */
function rejoinOperation(info: OpenAPIRouterInfo, registry: boolean, base: string): OpenAPIOperation {
  const summary = 'Rejoin a streamed turn: its events after Last-Event-ID, then the live ones to its end';
  const op = operation({ name: 'turn events', method: 'get', path: `${base}/turns/{turn_id}/events`, summary, reply: 'Error', streams: false }, info, registry);
  const query = (name: string, description: string): object => ({ name, in: 'query', required: false, description, schema: { type: 'string' } });
  op.parameters = [
    ...(op.parameters ?? []),
    { name: 'turn_id', in: 'path', required: true, description: 'The `Turn-Id` of the turn.', schema: { type: 'string', minLength: 1 } },
    query('stream', '`events` for the typed stream, `ui` for the AI SDK UI message stream (always from the start); otherwise the plain one.'),
    query('last_event_id', 'The `id` of the last event received (`<turn_id>:<seq>`), when no `Last-Event-ID` header is sent.'),
  ];
  op.responses['200'] = { description: 'OK', content: EVENT_STREAM };
  op.responses['204'] = { description: 'The turn ended and Last-Event-ID names its last event: nothing to send (an EventSource stops reconnecting)' };
  const error = (description: string, code: string): object => ({ description, content: { 'application/json': { schema: ref('Error'), example: { error: description, code } } } });
  op.responses['404'] = error('No such turn of this agent, or it ended more than replayTTL seconds ago', 'turn_not_found');
  op.responses['410'] = error('The events asked for are no longer kept (replayLimit)', 'replay_expired');
  return withOptions(info, op);
}

/** `POST .../cancel`: cancels a running or queued turn of the agent, here or in a process sharing its storage (shareTurns). */
function cancelOperation(info: OpenAPIRouterInfo, registry: boolean, base: string): OpenAPIOperation {
  const summary = 'Cancel the running turn, or the turn named, of the agent; it stores nothing';
  const op = operation({ name: 'cancel', method: 'post', path: `${base}/cancel`, summary, request: 'CancelRequest', reply: 'CancelResponse' }, info, registry);
  const ok = op.responses['200'];
  delete op.responses['200'];
  op.responses['202'] = { ...(ok as object), description: 'Cancelled: its stream ends with `cancelled`' };
  op.responses['404'] = { description: 'No such turn runs or waits', content: { 'application/json': { schema: ref('Error'), example: { error: 'Agent "bot" runs no turn here', code: 'no_running_turn' } } } };
  return withOptions(info, op);
}

/** Adds the router's `tags`, and merges its `responses` over each status (theirs win, field by field). */
function withOptions(info: OpenAPIRouterInfo, op: OpenAPIOperation): OpenAPIOperation {
  if (info.tags !== undefined && info.tags.length > 0) op.tags = [...info.tags];
  for (const status in info.responses) {
    op.responses[status] = { ...op.responses[status], ...structuredClone(info.responses[status]) };
  }
  return structuredClone(op);
}

/** `chat` under no prefix, `agentsChat` under `/agents`, `apiV1Chat` under `/api/v1`. */
function operationId(prefix: string, name: string): string {
  const words = `${prefix} ${name}`.split(/[^A-Za-z0-9]+/).filter((word) => word !== '');
  return words.map((word, i) => (i === 0 ? word.charAt(0).toLowerCase() + word.slice(1) : word.charAt(0).toUpperCase() + word.slice(1))).join('');
}
