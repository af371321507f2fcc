// OpenTelemetry spans with no dependency: the shapes of @opentelemetry/api 1.x written out, and W3C Trace Context.
import { AgentRouterError } from '../errors.ts';

export type TraceAttributeValue = string | number | boolean | string[] | number[];
export type TraceAttributes = Record<string, TraceAttributeValue>;

/** `@opentelemetry/api`'s TraceState, as far as this library reads and makes one. */
export interface TraceStateLike {
  get(key: string): string | undefined;
  set(key: string, value: string): TraceStateLike;
  unset(key: string): TraceStateLike;
  serialize(): string;
}

/** `@opentelemetry/api`'s SpanContext. */
export interface SpanContextLike {
  traceId: string;
  spanId: string;
  traceFlags: number;
  isRemote?: boolean | undefined;
  traceState?: TraceStateLike | undefined;
}

/** `@opentelemetry/api`'s Context: immutable values under symbol keys. */
export interface TraceContextLike {
  getValue(key: symbol): unknown;
  setValue(key: symbol, value: unknown): TraceContextLike;
  deleteValue(key: symbol): TraceContextLike;
}

/** The parts of `@opentelemetry/api`'s Span the library calls. */
export interface TraceSpan {
  spanContext(): SpanContextLike;
  setAttribute(key: string, value: TraceAttributeValue): unknown;
  setAttributes(attributes: TraceAttributes): unknown;
  setStatus(status: { code: number; message?: string }): unknown;
  recordException(exception: unknown): unknown;
  updateName(name: string): unknown;
  end(): void;
}

/**
 * Any object shaped like `@opentelemetry/api`'s `Tracer` (`trace.getTracer('my-app')`).
 * Parents are passed as the third argument of `startSpan`: no context manager is needed.
 */
export interface Tracer {
  startSpan(name: string, options?: { kind?: number; attributes?: TraceAttributes }, context?: TraceContextLike): TraceSpan;
}

/** SpanKind and SpanStatusCode of @opentelemetry/api. */
export const SPAN_KIND = { internal: 0, server: 1, client: 2 } as const;
const STATUS_ERROR = 2;

/** @opentelemetry/api's span key: `createContextKey` makes it with Symbol.for, so every copy of the API shares it. */
const SPAN_KEY = Symbol.for('OpenTelemetry Context Key SPAN');

class TraceContext implements TraceContextLike {
  readonly #values: Map<symbol, unknown>;
  constructor(values: Map<symbol, unknown>) {
    this.#values = values;
  }
  getValue(key: symbol): unknown {
    return this.#values.get(key);
  }
  setValue(key: symbol, value: unknown): TraceContextLike {
    return new TraceContext(new Map(this.#values).set(key, value));
  }
  deleteValue(key: symbol): TraceContextLike {
    const values = new Map(this.#values);
    values.delete(key);
    return new TraceContext(values);
  }
}

const ROOT = new TraceContext(new Map());

/** A tracestate header kept as received (the library never edits it). */
class RawTraceState implements TraceStateLike {
  readonly #text: string;
  constructor(text: string) {
    this.#text = text;
  }
  #members(): string[][] {
    return this.#text.split(',').map((member) => member.trim().split('=')).filter((pair) => pair.length === 2);
  }
  get(key: string): string | undefined {
    return this.#members().find(([k]) => k === key)?.[1];
  }
  set(key: string, value: string): TraceStateLike {
    return new RawTraceState([`${key}=${value}`, ...this.#members().filter(([k]) => k !== key).map((pair) => pair.join('='))].join(','));
  }
  unset(key: string): TraceStateLike {
    return new RawTraceState(this.#members().filter(([k]) => k !== key).map((pair) => pair.join('=')).join(','));
  }
  serialize(): string {
    return this.#text;
  }
}

/**
 * Where a request or turn stands in its trace: the tracer and the context its
 * children start in, and the `traceparent`/`tracestate` sent on to remotes and providers.
 */
export interface TraceLink {
  readonly tracer: Tracer | undefined;
  readonly context: TraceContextLike;
  readonly traceparent: string | undefined;
  readonly tracestate: string | undefined;
  /** The span the link is under (a turn's: its run marks it failed). */
  readonly span?: TraceSpan | undefined;
}

// Version 00 is exactly 55 characters; a later version may add fields after a dash (W3C Trace Context, 3.2).
const TRACEPARENT = /^([\da-f]{2})-([\da-f]{32})-([\da-f]{16})-([\da-f]{2})(-.*)?$/;
const TRACESTATE = /^[\x20-\x7e]{0,512}$/;

/** A `traceparent` header read strictly per W3C Trace Context, or undefined. */
export function parseTraceparent(value: unknown): SpanContextLike | undefined {
  if (typeof value !== 'string') return undefined;
  const match = TRACEPARENT.exec(value);
  if (match === null) return undefined;
  const [, version, traceId, spanId, flags, rest] = match as unknown as [string, string, string, string, string, string | undefined];
  if (version === 'ff' || (version === '00' && rest !== undefined)) return undefined;
  if (/^0+$/.test(traceId) || /^0+$/.test(spanId)) return undefined;
  return { traceId, spanId, traceFlags: parseInt(flags, 16) & 1, isRemote: true };
}

/**
 * The request's place in a trace: with a tracer, the context its server span
 * starts in (the caller's span, or a new trace); without, the caller's headers
 * as they came, only when valid, to send on unchanged.
 */
export function incomingTrace(headers: Readonly<Record<string, string | string[] | undefined>>, tracer: Tracer | undefined): TraceLink | undefined {
  const header = headers['traceparent'];
  if (header === undefined && tracer === undefined) return undefined;
  const parent = parseTraceparent(header);
  const state = headers['tracestate'];
  const tracestate = parent !== undefined && typeof state === 'string' && state !== '' && TRACESTATE.test(state) ? state : undefined;
  if (tracer === undefined) return parent === undefined ? undefined : { tracer, context: ROOT, traceparent: header as string, tracestate };
  if (parent === undefined) return { tracer, context: ROOT, traceparent: undefined, tracestate: undefined };
  if (tracestate !== undefined) parent.traceState = new RawTraceState(tracestate);
  return { tracer, context: ROOT.setValue(SPAN_KEY, { spanContext: () => parent }), traceparent: undefined, tracestate: undefined };
}

/** Starts a span under `link` (which must have a tracer). */
export function startSpan(link: TraceLink, name: string, kind: number, attributes?: TraceAttributes): TraceSpan {
  return (link.tracer as Tracer).startSpan(name, attributes === undefined ? { kind } : { kind, attributes }, link.context);
}

/** The link for what runs under `span`: its children, and the headers sent for it. */
export function linkUnder(link: TraceLink, span: TraceSpan): TraceLink {
  const context = span.spanContext();
  const traceparent = `00-${context.traceId}-${context.spanId}-0${context.traceFlags & 1}`;
  const tracestate = context.traceState?.serialize();
  return { tracer: link.tracer, context: link.context.setValue(SPAN_KEY, span), span, traceparent, tracestate: tracestate === '' ? undefined : tracestate };
}

/** Writes the link's `traceparent` and `tracestate` into outgoing headers. */
export function traceHeaders(link: TraceLink | undefined, set: (name: string, value: string) => void): void {
  if (link?.traceparent === undefined) return;
  set('traceparent', link.traceparent);
  if (link.tracestate !== undefined) set('tracestate', link.tracestate);
}

/** The error code a failure is known by: an AgentRouterError's code, else `internal_error`. */
export function errorCode(error: unknown): string {
  return error instanceof AgentRouterError ? error.code : 'internal_error';
}

/** Marks a span failed: status ERROR with the error code as its description and `error.type`. */
export function failSpan(span: TraceSpan, error: unknown, code = errorCode(error)): void {
  span.setStatus({ code: STATUS_ERROR, message: code });
  span.setAttribute('error.type', code);
  if (error instanceof Error) span.recordException(error);
}

/** A model request's trace headers, under a symbol so no model sends them unless it reads them (provider-http does). */
export const modelTrace: unique symbol = Symbol('agent-router.modelTrace');

/** The trace headers a model request carries (the turn's model span's), set on the provider's request. */
export function setModelTraceHeaders(request: object, headers: Headers): void {
  traceHeaders((request as { [modelTrace]?: TraceLink })[modelTrace], (name, value) => headers.set(name, value));
}
