import { createSSEParser, type SSEEvent } from '../../src/sse/parser.ts';
import type { WireReply } from './fuzz-wire.ts';

/** Statuses docs/reference/http-api.md defines, plus 204 for a CORS preflight. 502 is absent: no remote is registered. */
export const DEFINED_STATUSES: ReadonlySet<number> = new Set([200, 202, 204, 400, 401, 403, 404, 405, 409, 410, 413, 415, 429, 503, 504]);

/**
 * What Node's HTTP server answers by itself, before any handler runs, to
 * bytes that are not a valid request (400, with `Connection: close`), an
 * unknown `Expect` (417) or headers over its limit (431): a bare status,
 * no content type, no body. The fuzz sends such requests on raw sockets only.
 */
export const NODE_PARSER_STATUSES: ReadonlySet<number> = new Set([400, 417, 431, 505]);

/** A marker the fuzz server puts in every deliberate failure's message; no answer may carry it. */
export const SECRET = 'SECRET-';

const INTERNAL = JSON.stringify({ error: 'Internal error', code: 'internal_error' });
const PLAIN_EVENTS = new Set(['message', 'done', 'error']);
const TYPED_EVENTS = new Set(['turn.started', 'text.delta', 'tool.call', 'tool.result', 'turn.finished', 'turn.failed']);
/** A turn id as the router makes it (HTTPTransport relays a remote's, but the fuzz registers no remote). */
const TURN_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export interface AnswerContext {
  /** A deliberately failing agent, action or hook may have been hit. */
  mayThrow: boolean;
  /** The request was HEAD. */
  head: boolean;
  /** The request came over a raw socket, so Node's own parser answers are possible. */
  raw: boolean;
}

/** What is wrong with an answer, or undefined when it is one the contract allows. */
export function problemWith(reply: WireReply, context: AnswerContext): string | undefined {
  const { status, headers, body } = reply;
  const type = headers['content-type'];
  if (context.raw && type === undefined && NODE_PARSER_STATUSES.has(status) && body === '') return undefined;
  if (body.includes(SECRET)) return `the answer leaks a deliberate failure's message: ${body.slice(0, 200)}`;
  if (status === 500) {
    if (!context.mayThrow) return 'a 500 although no deliberately failing agent, action or hook was involved';
    if (!reply.cut && !context.head && body !== INTERNAL) return `a 500 must say only ${INTERNAL}, got ${body.slice(0, 200)}`;
  } else if (!DEFINED_STATUSES.has(status)) {
    return `status ${status} is not one DESIGN.md defines`;
  }
  if (status === 204) return body === '' ? undefined : 'a 204 with a body';
  if (status === 405 && headers['allow'] === undefined) return 'a 405 without Allow';
  if (status === 429 && headers['retry-after'] === undefined) return 'a 429 without Retry-After';
  if (type === undefined) return `status ${status} without a content type`;
  if (status === 200 && type === 'text/event-stream') return reply.cut || context.head ? undefined : sseProblem(body, headers, context);
  if (!/^application\/json(;|$)/.test(type)) return `content type ${type} for status ${status}`;
  if (reply.cut || context.head) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return `the body is not JSON: ${body.slice(0, 200)}`;
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return `the body is not a JSON object: ${body.slice(0, 200)}`;
  const record = parsed as Record<string, unknown>;
  if (status >= 400) return errorBodyProblem(record);
  if (typeof record['agent_id'] !== 'string') return `a 200 without agent_id: ${body.slice(0, 200)}`;
  const keys = Object.keys(record);
  if (status === 202) {
    // Only a cancel answers 202: the turn it cancelled.
    if (keys.join(',') !== 'agent_id,turn_id,cancelled' || record['cancelled'] !== true) return `a 202 body with keys ${keys.join(',')}`;
    return typeof record['turn_id'] === 'string' && TURN_ID.test(record['turn_id']) ? undefined : `cancelled turn_id ${JSON.stringify(record['turn_id'])}`;
  }
  if (keys.join(',') === 'agent_id,pending_approvals') return Array.isArray(record['pending_approvals']) ? undefined : 'pending_approvals is not a list';
  if (keys.join(',') === 'agent_id,state') {
    if (headers['turn-id'] !== undefined) return 'a state read carries a Turn-Id header';
    return typeof record['state'] === 'object' && record['state'] !== null ? undefined : 'state is not an object';
  }
  // A chat or invoke reply is a turn: turn_id right after agent_id, the Turn-Id header's value.
  if (keys[1] !== 'turn_id') return `a 200 body with keys ${keys.join(',')}`;
  const turnId = record['turn_id'];
  if (typeof turnId !== 'string' || !TURN_ID.test(turnId)) return `turn_id ${JSON.stringify(turnId)} is not a turn id`;
  if (headers['turn-id'] !== turnId) return `turn_id ${turnId} but Turn-Id ${String(headers['turn-id'])}`;
  const rest = keys.slice(2).sort().join(',');
  if (rest === 'response' || rest === 'response,truncated') return typeof record['response'] === 'string' ? undefined : 'response is not a string';
  if (rest === 'result') return undefined;
  return `a 200 body with keys ${keys.join(',')}`;
}

/** Exactly `{"error": string, "code": snake_case}`. */
export function errorBodyProblem(record: Record<string, unknown>): string | undefined {
  const keys = Object.keys(record).sort().join(',');
  if (keys !== 'code,error') return `an error body with keys ${keys}`;
  if (typeof record['error'] !== 'string' || record['error'] === '') return 'error is not a non-empty string';
  if (typeof record['code'] !== 'string' || !/^[a-z][a-z0-9_]*$/.test(record['code'])) return `code ${JSON.stringify(record['code'])} is not snake_case`;
  return undefined;
}

/** The AI SDK UI message stream (`stream=ui`): JSON parts in `data:` only, `finish` or `error` last, then `[DONE]`. */
function uiStreamProblem(events: SSEEvent[], context: AnswerContext): string | undefined {
  if (events.at(-1)?.data !== '[DONE]' || events.some((event) => event.event !== 'message')) return 'a UI stream not ending with data: [DONE], or with named events';
  const parts = events.slice(0, -1).map((event) => JSON.parse(event.data) as Record<string, unknown>);
  const last = parts.at(-1);
  if (last === undefined || (last['type'] !== 'finish' && last['type'] !== 'error')) return `a UI stream ending with ${String(last?.['type'])}`;
  if (parts.slice(0, -1).some((part) => part['type'] === 'finish' || part['type'] === 'error')) return 'an ending part before the last one';
  if (last['type'] === 'error') {
    if (typeof last['errorText'] !== 'string' || typeof last['code'] !== 'string') return `UI error part ${JSON.stringify(last)}`;
    if (last['code'] === 'internal_error' && !context.mayThrow) return 'a UI stream failed with internal_error although nothing deliberate failed';
  }
  return undefined;
}

/**
 * A whole SSE answer: complete frames only, each event's `id:` its turn's
 * `<turn_id>:<seq>` (nothing may inject another), names from the plain or the typed stream, exactly one ending as the
 * last event, an error ending being `{"error", "code"}`.
 */
function sseProblem(body: string, headers: Record<string, string>, context: AnswerContext): string | undefined {
  if (!body.endsWith('\n\n')) return `the stream does not end with a whole frame: ${JSON.stringify(body.slice(-100))}`;
  const events: SSEEvent[] = [];
  createSSEParser({ onEvent: (event) => events.push(event) }).feed(body);
  const last = events[events.length - 1];
  if (last === undefined) return 'a stream without events';
  // The AI SDK's UI message stream names no events; its parts carry their own ids.
  if (events[0]?.data.startsWith('{"type":"start"')) {
    if (events.some((event) => event.id !== undefined)) return 'a UI stream event carries an id';
    return uiStreamProblem(events, context);
  }
  // Every event carries the id <turn_id>:<seq>, the turn being the Turn-Id header's, seq rising from 1 (tool events
  // count in it even where the plain stream does not send them); nothing else may inject or change an id.
  const turnId = headers['turn-id'];
  if (typeof turnId !== 'string' || !TURN_ID.test(turnId)) return `a stream whose Turn-Id is ${JSON.stringify(turnId)}`;
  let seq = 0;
  for (const event of events) {
    const match = event.id === undefined ? null : /^(.*):([1-9][0-9]*)$/.exec(event.id);
    if (match === null || match[1] !== turnId || Number(match[2]) <= seq) return `event ${event.event} has id ${JSON.stringify(event.id)} after seq ${seq} of turn ${turnId}`;
    seq = Number(match[2]);
  }
  const typed = events[0]?.event === 'turn.started';
  const names = typed ? TYPED_EVENTS : PLAIN_EVENTS;
  const odd = events.find((event) => !names.has(event.event));
  if (odd !== undefined) return `unexpected event ${JSON.stringify(odd.event)} in ${typed ? 'a typed' : 'a plain'} stream`;
  const endings = typed ? ['turn.finished', 'turn.failed'] : ['done', 'error'];
  if (!endings.includes(last.event)) return `the stream ends with ${last.event}, not ${endings.join(' or ')}`;
  if (events.slice(0, -1).some((event) => endings.includes(event.event))) return 'an ending event before the last one';
  if (last.event === 'done' && last.data !== '[DONE]') return `done carries ${last.data}`;
  if (typed) {
    for (const event of events) {
      const payload = JSON.parse(event.data) as { type?: unknown };
      if (payload.type !== event.event) return `typed event ${event.event} carries type ${String(payload.type)}`;
    }
  }
  if (last.event === 'error' || last.event === 'turn.failed') {
    const payload = JSON.parse(last.data) as Record<string, unknown>;
    if (typed) delete payload['type'];
    const problem = errorBodyProblem(payload);
    if (problem !== undefined) return `stream error: ${problem}`;
    if (payload['code'] === 'internal_error' && !context.mayThrow) return 'a stream failed with internal_error although nothing deliberate failed';
  }
  return undefined;
}
