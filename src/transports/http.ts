import { randomUUID } from 'node:crypto';
import { checkKnownOptions } from '../options.ts';
import { ON_DISCONNECT, WHEN_BUSY, type JsonObject, type JsonValue } from '../types.ts';
import { RemoteCall, type CallSettings, type FetchLike, type RelayedEvent } from './http-call.ts';
import { remoteURLBuilder, type RemoteURLBuilder } from './remote-url.ts';
import { Slots } from './slots.ts';
import type { AgentTransport, ChunkStream, TransportCallOptions } from './transport.ts';

export type { FetchLike } from './http-call.ts';

/**
 * The router's JSON chat through an HTTPTransport: the remote's reply with
 * its `truncated` mark, which `chat()`'s string cannot carry, so a hop
 * passes it on. @internal
 */
export const chatReply: unique symbol = Symbol('agent-router.chatReply');

/** The router's typed stream through an HTTPTransport: the remote's `stream=events`, tool events relayed as sent. @internal */
export const typedStream: unique symbol = Symbol('agent-router.typedStream');

/** A remote typed stream: text, and tool events as the remote sent them. @internal */
export interface TypedChunkStream extends AsyncIterable<string | RelayedEvent> {
  readonly ready: Promise<void>;
}

/** A remote chat reply as `chatReply` gives it. @internal */
export interface RemoteChatReply {
  response: string;
  truncated: boolean;
  /** The remote's `tool_calls`, passed on as sent. */
  toolCalls: JsonValue[] | undefined;
  /** The remote turn paused: its `pending_approvals`, as sent. */
  pendingApprovals?: JsonValue[] | undefined;
}

/** The router's approvals routes through an HTTPTransport (GET lists, POST decides). @internal */
export const approvalsCall: unique symbol = Symbol('agent-router.approvalsCall');

/**
 * What `new Headers()` takes: a record, a list of pairs or a Headers. Named
 * through Node's own `Headers`, not the DOM library's `HeadersInit`, which a
 * project without `lib: ["DOM"]` does not have.
 */
export type HeadersInput = ConstructorParameters<typeof Headers>[0];

export interface HTTPTransportOptions {
  /**
   * Headers sent to the remote on every request, e.g.
   * `{ Authorization: 'Bearer <ACCESS_TOKEN>' }`. Nothing from an inbound
   * request is forwarded but what `forwardHeaders` names. `host` (with
   * Node's own fetch) and the framing headers fetch sets itself
   * (`content-length`, `transfer-encoding`, ...) are refused.
   */
  headers?: HeadersInput | undefined;
  /**
   * Seconds the remote may stay silent: until the response headers arrive,
   * and between any two reads of the body (SSE `: ping` comments count), so a
   * long stream that keeps sending is never cut. `Infinity` turns it off.
   * @defaultValue 30
   */
  timeout?: number | undefined;
  /**
   * The fetch to call. Node's global fetch keeps connections alive and reuses
   * them (undici's pool). To tune the pool itself, pass a fetch bound to your
   * own undici dispatcher: `(url, init) => undici.fetch(url, { ...init, dispatcher })`.
   * @defaultValue globalThis.fetch
   */
  fetch?: FetchLike | undefined;
  /**
   * Headers of the caller's request sent on to the remote, when the request
   * has them: `['authorization']` for a remote that checks the caller's own
   * token, `['x-tenant-id']`. None by default, so a caller's credentials
   * reach no remote unless named here. The transport's own headers
   * (`accept`, `content-type`, `x-request-id`), `host`, the framing and
   * connection headers, and a name also set in `headers` are refused.
   * @defaultValue []
   */
  forwardHeaders?: readonly string[] | undefined;
  /**
   * Requests in flight at once through this transport (a stream counts until
   * it ends); more wait for a free slot, within `timeout`. Node's fetch uses
   * one HTTP/1.1 connection per request in flight, so this also bounds the
   * connections in use; a connection closed after an abort or a timeout may
   * linger a moment while its replacement opens.
   * @defaultValue 256
   */
  maxConnections?: number | undefined;
  /**
   * Largest JSON reply, and largest streamed reply (all its events
   * together), accepted, in bytes; a bigger one is a 502 (an `event: error`
   * once the stream began).
   * @defaultValue 16 MiB
   */
  maxResponseSize?: number | undefined;
}

export interface HTTPTransportCallOptions extends TransportCallOptions {
  /** Sent as `x-request-id` (printable ASCII, at most 200 characters); a random UUID otherwise. */
  requestId?: string | undefined;
}

const TRANSPORT_OPTIONS: { readonly [K in keyof Required<HTTPTransportOptions>]: true } = {
  headers: true, forwardHeaders: true, timeout: true, fetch: true, maxConnections: true, maxResponseSize: true,
};

const REQUEST_ID = /^[\x21-\x7e]{1,200}$/;

const POLICIES = { whenBusy: ['when_busy', WHEN_BUSY], onDisconnect: ['on_disconnect', ON_DISCONNECT] } as const;

/** A call's `whenBusy` and `onDisconnect` as the remote's query parameters; a value the remote would refuse throws here. */
function policiesOf(options: HTTPTransportCallOptions): Record<string, string> {
  const query: Record<string, string> = {};
  for (const key of ['whenBusy', 'onDisconnect'] as const) {
    const value = options[key];
    if (value === undefined) continue;
    const [param, allowed] = POLICIES[key];
    if (!(allowed as readonly string[]).includes(value)) throw new TypeError(`HTTPTransport: ${key} must be ${allowed.join(', ')} or undefined, got ${JSON.stringify(value)}`);
    query[param] = value;
  }
  return query;
}

/** Set per request by the transport; a configured value for them is ignored. */
const OWN_HEADERS = new Set(['accept', 'content-type', 'x-request-id']);
/**
 * How the body is framed and the connection kept: Node's fetch sets these
 * itself and fails every request given one (or, for content-length, sends a
 * body the remote never sees whole), which the transport would report as a
 * remote it could not reach. Refused where the mistake is.
 */
const FRAMING_HEADERS = new Set(['content-length', 'transfer-encoding', 'keep-alive', 'upgrade', 'expect']);
/** The inbound connection's own (RFC 9110, 7.6.1), never a forwarded request's, besides the framing ones. */
const HOP_HEADERS = new Set(['host', 'connection', 'proxy-connection', 'te', 'trailer']);

/**
 * A registry target that forwards to another agent router or AgentServer
 * over fetch, and a small client for one. The agent id travels as one
 * encoded path segment: `${url}/${encodeURIComponent(id)}/chat`; a url
 * holding `{agent_id}` (a remote single-agent router) gets it substituted.
 *
 * Failures are AgentRouterErrors: unreachable 502 `upstream_unreachable`,
 * silent past `timeout` 504 `upstream_timeout`, a 4xx JSON error relayed
 * with its status and code, a 503 as a 503 with its Retry-After, a 504 as
 * a 504, another 5xx, a redirect or a non-JSON answer 502. An
 * aborted signal rejects with the signal's reason.
 *
 * @example
 * registry.register('remote-.*', new HTTPTransport('http://10.0.0.5:8080/agent',
 *   { headers: { Authorization: 'Bearer <ACCESS_TOKEN>' } }));
 *
 * const remote = new HTTPTransport('http://10.0.0.5:8080/agent');
 * const reply = await remote.chat('bot-1', 'Hello', { signal: AbortSignal.timeout(5000) });
 * for await (const chunk of remote.stream('bot-1', 'Tell me more')) process.stdout.write(chunk);
 */
export class HTTPTransport implements AgentTransport {
  readonly #url: RemoteURLBuilder;
  readonly #settings: CallSettings;
  /** `forwardHeaders`, lowercased. */
  readonly #forward: readonly string[];

  constructor(url: string | URL, options: HTTPTransportOptions = {}) {
    this.#url = remoteURLBuilder(url);
    for (const key of ['whenBusy', 'onDisconnect', 'signal', 'requestId'] as const) {
      if ((options as Record<string, unknown>)[key] !== undefined) throw new TypeError(`HTTPTransport: ${key} is an option of each call, not of the transport: remote.chat(id, message, { ${key} })`);
    }
    checkKnownOptions(options, TRANSPORT_OPTIONS, 'HTTPTransport');
    const timeout = options.timeout ?? 30;
    if (typeof timeout !== 'number' || !(timeout > 0)) {
      throw new TypeError(`HTTPTransport: timeout is in seconds and must be a positive number (or Infinity), got ${String(timeout)}`);
    }
    const maxConnections = options.maxConnections ?? 256;
    if (!(Number.isInteger(maxConnections) && maxConnections > 0) && maxConnections !== Infinity) {
      throw new TypeError(`HTTPTransport: maxConnections must be a positive integer (or Infinity), got ${String(maxConnections)}`);
    }
    const maxResponseSize = options.maxResponseSize ?? 16 * 1024 * 1024;
    if (!(Number.isInteger(maxResponseSize) && maxResponseSize > 0)) {
      throw new TypeError(`HTTPTransport: maxResponseSize must be a positive integer (bytes), got ${String(maxResponseSize)}`);
    }
    if (options.fetch !== undefined && typeof options.fetch !== 'function') {
      throw new TypeError('HTTPTransport: fetch must be a function shaped like the global fetch');
    }
    const headers: Record<string, string> = Object.create(null);
    try {
      // Headers checks names and values and lowercases the names, once, here.
      for (const [name, value] of new Headers(options.headers)) if (!OWN_HEADERS.has(name)) headers[name] = value;
    } catch {
      // Not rethrown as the cause: fetch's message quotes the value, which may be a token.
      throw new TypeError('HTTPTransport: headers holds an invalid header name or value (line breaks and characters outside Latin-1 are not allowed)');
    }
    for (const name in headers) {
      if (FRAMING_HEADERS.has(name)) throw new TypeError(`HTTPTransport: headers cannot set ${name}; fetch frames the body and keeps the connection itself, so leave it out`);
    }
    // Node's fetch sends the url's host whatever the headers say: a virtual host name set here would be dropped unseen.
    if ('host' in headers && options.fetch === undefined) {
      throw new TypeError('HTTPTransport: headers cannot set host, which Node\'s fetch takes from the url; put that name in the url (a DNS name for the remote), or pass a fetch of your own that sends it');
    }
    this.#forward = forwardedNames(options.forwardHeaders, headers);
    this.#settings = {
      fetch: options.fetch ?? ((input, init) => fetch(input, init)),
      headers,
      timeout,
      slots: new Slots(maxConnections),
      maxResponseSize,
    };
  }

  /** Sends one message; resolves with the remote agent's whole reply. */
  async chat(agentId: string, message: string, options: HTTPTransportCallOptions = {}): Promise<string> {
    return (await this[chatReply](agentId, message, options)).response;
  }

  /** See `chatReply`. @internal */
  async [chatReply](agentId: string, message: string, options: HTTPTransportCallOptions = {}, route = '/chat', body?: object): Promise<RemoteChatReply> {
    const call = this.#start(agentId, route, body ?? { message: checkMessage(message) }, false, options);
    const reply = await call.readJson(await call.response);
    if (typeof reply['response'] !== 'string') throw call.badResponse('JSON without a "response" string');
    const toolCalls = Array.isArray(reply['tool_calls']) ? (reply['tool_calls'] as JsonValue[]) : undefined;
    const pending = Array.isArray(reply['pending_approvals']) ? (reply['pending_approvals'] as JsonValue[]) : undefined;
    return { response: reply['response'], truncated: reply['truncated'] === true, toolCalls, ...(pending === undefined ? {} : { pendingApprovals: pending }) };
  }

  /**
   * See `approvalsCall`: the remote's list (GET, `decisions` undefined), or
   * its resumed turn, as a chat reply or a stream. @internal
   */
  [approvalsCall](agentId: string, decisions: readonly object[] | undefined, stream: boolean | 'events', options: HTTPTransportCallOptions = {}): Promise<JsonObject> | Promise<RemoteChatReply> | TypedChunkStream {
    if (decisions === undefined) {
      const call = this.#start(agentId, '/approvals', undefined, false, options);
      return call.response.then((response) => call.readJson(response)) as Promise<JsonObject>;
    }
    if (stream !== false) return this.#stream(agentId, '', options, stream === 'events', '/approvals', { decisions });
    return this[chatReply](agentId, '', options, '/approvals', { decisions });
  }

  /**
   * Streams one reply as it is generated. The request starts at once; `ready`
   * settles when the remote accepted it (rejecting with the error `chat`
   * would throw). Iterate at most once; breaking out cancels the request. A
   * stream that is never iterated is dropped after `timeout` seconds, or when
   * the signal aborts.
   */
  stream(agentId: string, message: string, options: HTTPTransportCallOptions = {}): ChunkStream {
    return this.#stream(agentId, message, options, false) as ChunkStream;
  }

  /** See `typedStream`. @internal */
  [typedStream](agentId: string, message: string, options: HTTPTransportCallOptions = {}): TypedChunkStream {
    return this.#stream(agentId, message, options, true);
  }

  #stream(agentId: string, message: string, options: HTTPTransportCallOptions, typed: boolean, route = '/chat', body?: object): TypedChunkStream {
    let call: RemoteCall | undefined;
    let response: Promise<Response>;
    try {
      call = this.#start(agentId, route, body ?? { message: checkMessage(message) }, typed ? 'events' : true, options);
      response = call.response;
    } catch (error) {
      response = Promise.reject(error);
    }
    const ready = response.then(noop);
    ready.catch(noop); // awaiting `ready` is optional; iterating rethrows the same error
    let iterated = false;
    return {
      ready,
      [Symbol.asyncIterator]() {
        if (iterated) throw new TypeError('HTTPTransport.stream: a ChunkStream can be iterated only once');
        iterated = true;
        return call !== undefined ? call.chunks() : failed(response);
      },
    };
  }

  /** Calls one of the remote agent's actions; resolves with its result. */
  async invoke(agentId: string, method: string, params?: unknown, options: HTTPTransportCallOptions = {}): Promise<unknown> {
    if (typeof method !== 'string' || method === '') {
      throw new TypeError('HTTPTransport.invoke: method must be a non-empty string, e.g. invoke("counter-1", "increment", { by: 2 })');
    }
    const call = this.#start(agentId, '/invoke', params === undefined ? { method } : { method, params }, false, options);
    const reply = await call.readJson(await call.response);
    if (!('result' in reply)) throw call.badResponse('JSON without a "result"');
    return reply['result'];
  }

  /**
   * Cancels the remote agent's running turn, or its turn `turnId` (running or
   * queued); resolves with the remote's `{agent_id, turn_id, cancelled}`.
   * With none to cancel, rejects with the remote's 404 `no_running_turn`.
   */
  async cancel(agentId: string, turnId?: string, options: HTTPTransportCallOptions = {}): Promise<JsonObject> {
    const call = this.#start(agentId, '/cancel', turnId === undefined ? {} : { turn_id: turnId }, false, options);
    return (await call.readJson(await call.response)) as JsonObject;
  }

  /** The remote agent's state. */
  async state(agentId: string, options: HTTPTransportCallOptions = {}): Promise<JsonObject> {
    const call = this.#start(agentId, '/state', undefined, false, options);
    const reply = await call.readJson(await call.response);
    const state = reply['state'];
    if (typeof state !== 'object' || state === null || Array.isArray(state)) throw call.badResponse('JSON without a "state" object');
    return state as JsonObject;
  }

  #start(agentId: string, route: string, body: object | undefined, stream: boolean | 'events', options: HTTPTransportCallOptions): RemoteCall {
    const url = this.#url(agentId, route, stream, policiesOf(options));
    const requestId = options.requestId !== undefined && REQUEST_ID.test(options.requestId) ? options.requestId : randomUUID();
    const call = new RemoteCall(this.#settings, {
      url,
      method: body === undefined ? 'GET' : 'POST',
      body: body === undefined ? undefined : JSON.stringify(body),
      stream: stream !== false,
      typed: stream === 'events',
      requestId,
      forwarded: this.#forward.length === 0 || options.requestHeaders === undefined ? undefined : pick(this.#forward, options.requestHeaders),
      signal: options.signal,
      trace: options.trace,
    });
    const onTurnId = options.onTurnId;
    // Registered before any caller awaits the response: the id is known before the reply or stream goes on.
    if (onTurnId !== undefined) call.response.then((response) => relayTurnId(response, onTurnId), noop);
    return call;
  }
}

/** The remote's `Turn-Id`, when it is one (printable, no spaces, at most 200 characters). */
function relayTurnId(response: Response, onTurnId: (turnId: string) => void): void {
  const id = response.headers.get('turn-id');
  if (id !== null && /^[\x21-\x7e]{1,200}$/.test(id)) onTurnId(id);
}

/** `forwardHeaders` checked and lowercased; `configured` is the `headers` option's. */
function forwardedNames(names: unknown, configured: Readonly<Record<string, string>>): string[] {
  if (names === undefined) return [];
  if (!Array.isArray(names)) throw new TypeError('HTTPTransport: forwardHeaders must be an array of header names, e.g. [\'authorization\']');
  return names.map((name: unknown) => {
    let lower: string;
    try {
      if (typeof name !== 'string') throw new TypeError('not a string');
      lower = new Headers([[name, '']]).keys().next().value as string;
    } catch {
      throw new TypeError(`HTTPTransport: forwardHeaders holds ${typeof name === 'string' ? JSON.stringify(name) : String(name)}, which is not a header name`);
    }
    if (OWN_HEADERS.has(lower) || FRAMING_HEADERS.has(lower) || HOP_HEADERS.has(lower)) {
      throw new TypeError(`HTTPTransport: forwardHeaders cannot name ${lower}: the transport${OWN_HEADERS.has(lower) ? ' sets it itself' : "'s fetch and connection own it"}`);
    }
    if (lower in configured) throw new TypeError(`HTTPTransport: ${lower} is in both headers and forwardHeaders; send the configured value or the caller's, not both`);
    return lower;
  });
}

/** The named headers the caller's request has; a repeated one (Node gives an array) joined as HTTP joins it. */
function pick(names: readonly string[], from: Readonly<Record<string, string | string[] | undefined>>): Record<string, string> | undefined {
  let picked: Record<string, string> | undefined;
  for (const name of names) {
    const value = from[name];
    if (value === undefined) continue;
    picked ??= {};
    picked[name] = typeof value === 'string' ? value : value.join(name === 'cookie' ? '; ' : ', ');
  }
  return picked;
}

function checkMessage(message: string): string {
  if (typeof message !== 'string') throw new TypeError('HTTPTransport: message must be a string, e.g. chat("bot-1", "Hello")');
  return message;
}

const noop = (): void => {};

/** The iterator of a stream that could not even start: it throws what `ready` rejected with. */
async function* failed(response: Promise<Response>): AsyncGenerator<string, void, undefined> {
  await response;
}
