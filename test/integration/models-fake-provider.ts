/**
 * A fake model provider on 127.0.0.1:0 for the OpenAI and Anthropic model
 * tests: it records what it received and replays a recorded stream, written
 * in odd-sized pieces with a flush between them, then ends, holds the
 * connection open, or cuts it.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import path from 'node:path';
import type { TestContext } from 'node:test';
import { ModelProviderError, UpstreamError } from '../../src/errors.ts';
import type { Model } from '../../src/models/model.ts';
import { providerTimers } from '../../src/models/provider-http.ts';
import type { ChatMessage, TokenUsage, ToolCall, ToolDefinition } from '../../src/types.ts';
import { listen } from '../helpers/listen.ts';

export interface FakeReply {
  status?: number | undefined;
  headers?: Record<string, string> | undefined;
  body?: string | undefined;
  /** Sizes (bytes) of the pieces the body is written in, cycled; the whole body at once when absent. */
  pieces?: readonly number[] | undefined;
  /** Never answer, not even with headers. */
  silent?: boolean | undefined;
  /** After the body: end the response (default), keep it open, or destroy the socket. */
  after?: 'end' | 'hold' | 'cut' | undefined;
}

export interface ReceivedRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: Record<string, unknown>;
  /** Resolves when the connection closes; `finished` is false when the client went away first. */
  closed: Promise<{ finished: boolean }>;
}

export interface FakeProvider {
  url: string;
  requests: ReceivedRequest[];
  /** Resolves with request number `index` (0-based) once its body has arrived. */
  request(index: number): Promise<ReceivedRequest>;
}

export const fixture = (name: string): string => readFileSync(path.join(process.cwd(), 'test/fixtures', name), 'utf8');

export const SPLITS = [1, 2, 3, 5, 7, 11, 13, 17] as const;

export async function fakeProvider(
  t: TestContext,
  reply: (index: number, request: ReceivedRequest) => FakeReply,
): Promise<FakeProvider> {
  const requests: ReceivedRequest[] = [];
  const waiters = new Map<number, (request: ReceivedRequest) => void>();
  const { url, close } = await listen(async (req, res) => {
    const closed = new Promise<{ finished: boolean }>((resolve) => {
      res.on('close', () => resolve({ finished: res.writableFinished }));
    });
    let text = '';
    for await (const part of req) text += String(part);
    const received: ReceivedRequest = {
      method: req.method ?? '',
      url: req.url ?? '',
      headers: req.headers,
      body: text === '' ? {} : (JSON.parse(text) as Record<string, unknown>),
      closed,
    };
    const index = requests.push(received) - 1;
    waiters.get(index)?.(received);
    await send(res, reply(index, received));
  });
  t.after(close);
  return {
    url,
    requests,
    request: (index) =>
      index < requests.length
        ? Promise.resolve(requests[index] as ReceivedRequest)
        : new Promise((resolve) => waiters.set(index, resolve)),
  };
}

async function send(res: ServerResponse, reply: FakeReply): Promise<void> {
  if (reply.silent === true) return;
  res.writeHead(reply.status ?? 200, reply.headers ?? { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.flushHeaders();
  const bytes = Buffer.from(reply.body ?? '');
  const sizes = reply.pieces ?? [Math.max(bytes.length, 1)];
  for (let offset = 0, i = 0; offset < bytes.length && !res.destroyed; i++) {
    const size = sizes[i % sizes.length] ?? 1;
    await new Promise<void>((resolve) => res.write(bytes.subarray(offset, offset + size), () => resolve()));
    offset += size;
    // Let the piece leave the socket before the next one, so the client reads it alone.
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  const after = reply.after ?? 'end';
  if (after === 'end') res.end();
  else if (after === 'cut') res.socket?.destroy();
}

/**
 * A `fetch` that hands the body on in pieces of the given sizes, cycled: the
 * parser then sees lines, CRLF pairs and UTF-8 characters split at every
 * offset, whatever the network does with the server's pieces.
 */
export function splittingFetch(sizes: readonly number[]): typeof fetch {
  return async (input, init) => {
    const response = await fetch(input, init);
    if (response.body === null) return response;
    const reader = response.body.getReader();
    let pending = new Uint8Array(0);
    let turn = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const size = sizes[turn++ % sizes.length] ?? 1;
        while (pending.length < size) {
          const { done, value } = await reader.read();
          if (done) {
            if (pending.length > 0) controller.enqueue(pending);
            controller.close();
            return;
          }
          const joined = new Uint8Array(pending.length + value.length);
          joined.set(pending);
          joined.set(value, pending.length);
          pending = joined;
        }
        controller.enqueue(pending.slice(0, size));
        pending = pending.slice(size);
      },
      cancel: (reason) => reader.cancel(reason),
    });
    return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
}

/** A port that refuses connections: bound once, then closed. */
export async function closedPortURL(): Promise<string> {
  const { url, close } = await listen(() => {});
  await close();
  return url;
}

export interface Outcome {
  /** The text chunks, in order. */
  chunks: string[];
  usage: TokenUsage | undefined;
  /** The model yielded `{truncated: true}`. */
  truncated: boolean;
  /** The tool calls, in order. */
  toolCalls: ToolCall[];
  /** Every chunk, in the order yielded (text and tool calls interleave as the model sent them). */
  sequence: unknown[];
  /** What the stream threw, if it did. */
  error: unknown;
}

/** Runs one turn to the end (or the error), keeping what arrived before an error. */
export async function collect(
  model: Model,
  request: { system?: string | undefined; messages?: ChatMessage[] | undefined; signal?: AbortSignal | undefined; tools?: ToolDefinition[] | undefined } = {},
): Promise<Outcome> {
  const outcome: Outcome = { chunks: [], usage: undefined, truncated: false, toolCalls: [], sequence: [], error: undefined };
  try {
    for await (const chunk of model.stream({
      system: request.system,
      messages: request.messages ?? [{ role: 'user', content: 'Hello' }],
      signal: request.signal ?? new AbortController().signal,
      tools: request.tools,
    })) {
      outcome.sequence.push(chunk);
      if (typeof chunk === 'string') outcome.chunks.push(chunk);
      else if ('toolCall' in chunk) outcome.toolCalls.push(chunk.toolCall);
      else if ('truncated' in chunk) {
        assert.equal(outcome.truncated, false, 'a model yields at most one truncated record');
        outcome.truncated = true;
      } else {
        assert.equal(outcome.usage, undefined, 'a model yields at most one usage record');
        outcome.usage = chunk.usage;
      }
    }
  } catch (error) {
    outcome.error = error;
  }
  return outcome;
}

/** Asserts a typed provider error and returns it. */
export function providerError(outcome: Outcome, code: string): ModelProviderError {
  assert.ok(outcome.error instanceof ModelProviderError, `expected a ModelProviderError, got ${String(outcome.error)}`);
  assert.ok(outcome.error instanceof UpstreamError);
  assert.equal(outcome.error.code, code, outcome.error.message);
  return outcome.error;
}

export interface ManualTimer {
  ms: number;
  callback: () => void;
  cleared: boolean;
}

/**
 * Replaces the models' timers (idle timeout, retry wait) with a manual clock
 * for one test: nothing fires until the test says so, and no test sleeps.
 */
export function manualClock(t: TestContext): {
  /** Resolves with the first live timer of `ms` milliseconds once it is scheduled. */
  scheduled: (ms: number) => Promise<ManualTimer>;
  /** Runs every live timer of `ms` milliseconds; returns how many ran. */
  fire: (ms: number) => number;
} {
  const timers: ManualTimer[] = [];
  const waiting: Array<{ ms: number; resolve: (timer: ManualTimer) => void }> = [];
  const live = (ms: number): ManualTimer | undefined => timers.find((timer) => timer.ms === ms && !timer.cleared);
  t.mock.method(providerTimers, 'setTimeout', (callback: () => void, ms: number): unknown => {
    const timer: ManualTimer = { ms, callback, cleared: false };
    timers.push(timer);
    for (const waiter of waiting.filter((w) => w.ms === ms)) {
      waiting.splice(waiting.indexOf(waiter), 1);
      waiter.resolve(timer);
    }
    return timer;
  });
  t.mock.method(providerTimers, 'clearTimeout', (handle: unknown): void => {
    if (handle !== undefined) (handle as ManualTimer).cleared = true;
  });
  return {
    scheduled: (ms) => {
      const timer = live(ms);
      return timer !== undefined ? Promise.resolve(timer) : new Promise((resolve) => waiting.push({ ms, resolve }));
    },
    fire: (ms) => {
      const due = timers.filter((timer) => timer.ms === ms && !timer.cleared);
      for (const timer of due) {
        timer.cleared = true;
        timer.callback();
      }
      return due.length;
    },
  };
}
