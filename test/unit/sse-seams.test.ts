// ChunkSeam: a plain SSE stream of any cutting of a reply into chunks reads
// back as the reply itself, up to what SSE cannot carry (every line break
// arrives as "\n", a lone surrogate as U+FFFD), however the cuts fall.
import assert from 'node:assert/strict';
import test from 'node:test';
import fc from 'fast-check';
import { formatEvent } from '../../src/sse/format.ts';
import { createSSEParser } from '../../src/sse/parser.ts';
import { ChunkSeam } from '../../src/sse/seams.ts';

/** What ReplyStream does with each chunk, as bytes on the wire, read back by a spec parser. */
function streamed(chunks: readonly string[]): string {
  let seam: ChunkSeam | undefined;
  let wire = '';
  const send = (text: string): void => {
    // The socket writes UTF-8: a lone surrogate becomes U+FFFD there.
    if (text !== '') wire += Buffer.from(formatEvent(text)).toString('utf8');
  };
  for (const chunk of chunks) {
    if (seam !== undefined) send(seam.next(chunk));
    else if (ChunkSeam.needed(chunk)) send((seam = new ChunkSeam()).next(chunk));
    else send(chunk);
  }
  if (seam?.holding === true) send(seam.next(''));
  let text = '';
  const parser = createSSEParser({ onEvent: (event) => (text += event.data) });
  parser.feed(wire);
  return text;
}

/** The reply as SSE can carry it: line breaks as "\n", then UTF-8's replacement of lone surrogates. */
function carried(reply: string): string {
  return Buffer.from(reply.replace(/\r\n|\r/g, '\n')).toString('utf8');
}

test('a pair or a CRLF cut by a chunk boundary is carried whole', () => {
  assert.equal(streamed(['x\uD83D', '\uDE00y']), 'x😀y');
  assert.equal(streamed(['a\r', '\nb']), 'a\nb');
  assert.equal(streamed(['a\r', '\n']), 'a\n');
  assert.equal(streamed(['a\r', '\r', '\nb']), 'a\n\nb');
  assert.equal(streamed(['\uD83D', '\uD83D', '\uDE00']), '\uFFFD😀');
  assert.equal(streamed(['a\uD83D']), 'a\uFFFD', 'a half never completed still goes out at the end');
});

const seed = process.env['FUZZ_SEED'] !== undefined ? Number(process.env['FUZZ_SEED']) : (Date.now() ^ Math.floor(Math.random() * 0x7fffffff)) | 0;

test(`any cutting of any reply reads back as the reply (seed ${seed}; replay with FUZZ_SEED=${seed})`, () => {
  const piece = fc.constantFrom('a', ' ', '\r', '\n', '\r\n', '\uD83D', '\uDE00', '😀', 'é');
  const chunks = fc.array(fc.array(piece, { minLength: 1, maxLength: 6 }).map((p) => p.join('')), { minLength: 1, maxLength: 8 });
  fc.assert(
    fc.property(chunks, (cut) => streamed(cut) === carried(cut.join(''))),
    { seed, numRuns: 2000 },
  );
});
