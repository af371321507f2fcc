import assert from 'node:assert/strict';
import test from 'node:test';
import { createSSEParser, readSSE, type SSEEvent } from '../../src/sse/parser.ts';
import { listen } from '../helpers/listen.ts';

interface Collected {
  events: SSEEvent[];
  comments: string[];
  retries: number[];
}

/** Feeds `chunks` one by one into a fresh parser and records what it reports. */
function parse(chunks: readonly string[], maxBufferSize?: number): Collected {
  const out: Collected = { events: [], comments: [], retries: [] };
  const parser = createSSEParser({
    onEvent: (event) => out.events.push(event),
    onComment: (comment) => out.comments.push(comment),
    onRetry: (ms) => out.retries.push(ms),
    maxBufferSize,
  });
  for (const chunk of chunks) parser.feed(chunk);
  return out;
}

/** Every way of cutting `text` into two pieces, plus one piece per character. */
function splits(text: string): string[][] {
  const result: string[][] = [[text], [...text]];
  for (let i = 1; i < text.length; i++) result.push([text.slice(0, i), text.slice(i)]);
  return result;
}

const message = (data: string, id?: string): SSEEvent => ({ event: 'message', data, id });

test('LF, CR and CRLF line ends give the same events, however the stream is split', () => {
  const lf = 'event: greet\ndata: hello\n\ndata: a\ndata: b\n\n';
  const expected: SSEEvent[] = [{ event: 'greet', data: 'hello', id: undefined }, message('a\nb')];
  for (const text of [lf, lf.replaceAll('\n', '\r'), lf.replaceAll('\n', '\r\n')]) {
    for (const chunks of splits(text)) {
      assert.deepEqual(parse(chunks).events, expected, JSON.stringify(chunks));
    }
  }
});

test('a CRLF split across chunks is one line end, even with an empty chunk between', () => {
  assert.deepEqual(parse(['data: x\r', '\n\r', '\n']).events, [message('x')]);
  // Regression: an empty feed between CR and LF used to forget the pending CR,
  // so the LF counted as a blank line and dispatched the event too early.
  assert.deepEqual(parse(['data: x\r', '', '\ndata: y\n\n']).events, [message('x\ny')]);
});

test('a leading BOM is dropped once; a BOM later in the stream is data', () => {
  assert.deepEqual(parse(['\uFEFFdata: a\n\n']).events, [message('a')]);
  assert.deepEqual(parse(['', '\uFEFF', 'data: a\n\n']).events, [message('a')]);
  assert.deepEqual(parse(['data: a\n\n', '\uFEFFdata: b\n\n']).events, [message('a')]);
  assert.deepEqual(parse(['data: \uFEFFb\n\n']).events, [message('\uFEFFb')]);
});

test('comments are reported without the colon and one space, and dispatch nothing', () => {
  const out = parse([': ping\n', ':no space\n', ':  two spaces\n', '\n']);
  assert.deepEqual(out.comments, ['ping', 'no space', ' two spaces']);
  assert.deepEqual(out.events, []);
});

test('only one space after the colon is removed', () => {
  assert.deepEqual(parse(['data:  two\n\n', 'data:none\n\n', 'data: \n\n']).events, [
    message(' two'),
    message('none'),
    message(''),
  ]);
});

test('multi-line data is joined with LF; a field without a colon has an empty value', () => {
  assert.deepEqual(parse(['data: one\ndata\ndata: three\n\n']).events, [message('one\n\nthree')]);
});

test('an event without data is not dispatched and its type does not leak into the next', () => {
  assert.deepEqual(parse(['event: lonely\n\n', 'data: x\n\n']).events, [message('x')]);
  assert.deepEqual(parse(['event: lonely\nid: 3\n\n\n\n']).events, []);
});

test('an unterminated last event is dropped', () => {
  assert.deepEqual(parse(['data: done\n\n', 'data: cut off\n']).events, [message('done')]);
  assert.deepEqual(parse(['data: cut off']).events, []);
});

test('id sets the last event id for this and later events; an id with NUL is ignored', () => {
  const out = parse(['id: 1\ndata: a\n\n', 'data: b\n\n', 'id: 2\0x\ndata: c\n\n', 'id\ndata: d\n\n']);
  assert.deepEqual(out.events, [message('a', '1'), message('b', '1'), message('c', '1'), message('d', '')]);
});

test('retry reports ASCII digits only', () => {
  const out = parse(['retry: 1500\n', 'retry: 1.5\n', 'retry: x\n', 'retry:\n', 'retry: ١٢\n', 'retry:42\n\n']);
  assert.deepEqual(out.retries, [1500, 42]);
  assert.deepEqual(out.events, []);
});

test('unknown fields are ignored and field names are case-sensitive', () => {
  assert.deepEqual(parse(['foo: bar\nData: x\nEVENT: y\ndata: z\n\n']).events, [message('z')]);
});

test('onUnknownField sees the fields the standard does not define, and only those; an error it throws stops the feed', () => {
  const fields: Array<[string, string]> = [];
  const events: SSEEvent[] = [];
  const parser = createSSEParser({ onEvent: (event) => events.push(event), onUnknownField: (field, value) => fields.push([field, value]) });
  parser.feed('error: {"code":500}\nDATA: x\nfoo\nevent: e\ndata: d\nid: 1\nretry: 5\n: c\n\n');
  assert.deepEqual(fields, [['error', '{"code":500}'], ['DATA', 'x'], ['foo', '']]);
  assert.deepEqual([...events], [{ event: 'e', data: 'd', id: '1' }]);
  const failing = createSSEParser({
    onEvent: (event) => events.push(event),
    onUnknownField: () => {
      throw new Error('stop');
    },
  });
  assert.throws(() => failing.feed('data: before\nerror: x\n\n'), /stop/);
  assert.equal(events.length, 1, 'the event around the line is not dispatched');
});

test('maxBufferSize caps an unterminated line and an event growing line by line', () => {
  const line = createSSEParser({ onEvent() {}, maxBufferSize: 16 });
  line.feed('data: 0123456789');
  assert.throws(() => line.feed('abcdef'), RangeError);

  const event = createSSEParser({ onEvent() {}, maxBufferSize: 16 });
  event.feed('data: 01234567\n');
  assert.throws(() => event.feed('data: 89abcdef\n'), RangeError);

  // Events under the cap, dispatched one after another, never add up.
  const ok = parse(['data: 0123456789\n\n'.repeat(10)], 16);
  assert.equal(ok.events.length, 10);
});

test('reset forgets a partial event and lets a new stream start with a BOM', () => {
  const events: SSEEvent[] = [];
  const parser = createSSEParser({ onEvent: (event) => events.push(event) });
  parser.feed('data: a\n\ndata: partial\nevent: x\ndata: more');
  parser.reset();
  parser.feed('\uFEFFdata: b\n\n');
  assert.deepEqual(events, [message('a'), message('b')]);
});

test('createSSEParser teaches the right call when misused', () => {
  assert.throws(() => createSSEParser(undefined as never), /onEvent/);
  assert.throws(() => createSSEParser({} as never), /createSSEParser\(\{ onEvent/);
});

function bodyOf(pieces: readonly Uint8Array[]): ReadableStream<Uint8Array> {
  return new ReadableStream({
    start(controller) {
      for (const piece of pieces) controller.enqueue(piece);
      controller.close();
    },
  });
}

test('readSSE decodes UTF-8 split inside a character and yields events in order', async () => {
  const bytes = new TextEncoder().encode('data: ¡hola 👋\r\n\r\nevent: e\r\ndata: 2\r\n\r\ndata: dropped');
  const pieces: Uint8Array[] = [];
  for (let i = 0; i < bytes.length; i += 3) pieces.push(bytes.subarray(i, i + 3));
  const events: SSEEvent[] = [];
  for await (const event of readSSE(bodyOf(pieces))) events.push(event);
  assert.deepEqual(events, [message('¡hola 👋'), { event: 'e', data: '2', id: undefined }]);
});

test('readSSE cancels the body when the consumer stops early', async () => {
  let cancelled = false;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      controller.enqueue(new TextEncoder().encode('data: tick\n\n'));
    },
    cancel() {
      cancelled = true;
    },
  });
  for await (const event of readSSE(body)) {
    assert.equal(event.data, 'tick');
    break;
  }
  assert.equal(cancelled, true);
});

test('readSSE passes comments and the buffer cap through to the parser', async () => {
  const comments: string[] = [];
  const encoder = new TextEncoder();
  const events: SSEEvent[] = [];
  for await (const event of readSSE(bodyOf([encoder.encode(': hi\n\ndata: x\n\n')]), { onComment: (c) => comments.push(c) })) {
    events.push(event);
  }
  assert.deepEqual(comments, ['hi']);
  assert.deepEqual(events, [message('x')]);

  const huge = bodyOf([encoder.encode(`data: ${'x'.repeat(64)}`)]);
  await assert.rejects(async () => {
    for await (const _ of readSSE(huge, { maxBufferSize: 32 })) void _;
  }, RangeError);
});

test("readSSE with the fetch's signal: a fetch aborted just as its body ends ends the reading (with the abort, or at the body's end), not a read pending for good", async (t) => {
  const server = await listen((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('data: a\n\n');
    setTimeout(() => res.end('event: done\ndata: b\n\n'), 20);
  });
  t.after(server.close);
  const abort = new AbortController();
  const res = await fetch(server.url, { signal: abort.signal });
  const seen: string[] = [];
  const reading = (async () => {
    for await (const event of readSSE(res.body as ReadableStream<Uint8Array>, { signal: abort.signal })) {
      seen.push(event.data);
      if (event.event === 'done') abort.abort();
    }
  })();
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    reading.then(() => 'ended', (error: Error) => error.name),
    new Promise<string>((resolve) => (timer = setTimeout(() => resolve('still reading after 2 s'), 2000))),
  ]);
  clearTimeout(timer);
  // Which of the two comes first depends on whether the body's end was read before the abort.
  assert.ok(outcome === 'AbortError' || outcome === 'ended', outcome);
  assert.deepEqual(seen, ['a', 'b']);
});
