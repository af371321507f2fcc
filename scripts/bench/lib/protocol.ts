/**
 * What the bench parent and its contender processes agree on: the request
 * bodies, the agent ids that select a reply shape, how a reply is cut into
 * SSE chunks, and the IPC messages. Every contender does exactly this work,
 * so the numbers compare serving layers and nothing else.
 */

/** The JSON chat body every contender receives; the echo reply is the message itself. */
export const CHAT_MESSAGE = 'Hello, agent! How are you today?';

/** Characters per SSE chunk: a streamed reply is its message cut into pieces this long. */
export const CHUNK_SIZE = 8;
/** Chunks in the reply of the SSE scenarios (3, 4). */
export const SSE_CHUNKS = 64;
/** Chunks of a slow stream (scenario 5): one a second, so it outlives any measurement. */
export const SLOW_CHUNKS = 240;
/** Milliseconds between two chunks of a slow stream. */
export const SLOW_INTERVAL_MS = 1000;

/** Ids starting with these select the reply shape; any other id is the plain echo agent. */
export const BURST_PREFIX = 'sse-burst-';
export const TURN_PREFIX = 'sse-turn-';
export const SLOW_PREFIX = 'sse-slow-';
/** A slow stream whose model sleeps on the turn's `request.signal` (scenario 5's extra row; the bare server has no such id). */
export const ABORTABLE_PREFIX = 'sse-abortable-';

/**
 * A JSON chat agent whose chat() is its own (an echo, no turn): scenario 1's
 * extra row, the router's serving work alone, without the agent's turn
 * (queue, history, storage commit) that the bare server does not do either.
 */
export const NO_TURN_PREFIX = 'chat-noturn-';

/** The state every agent starts with (and the bare server keeps per id). */
export const INITIAL_STATE = { topic: 'benchmarks' } as const;

/** A message of `chunks` chunks of CHUNK_SIZE characters each, e.g. `tok0... tok1... `. */
export function chunkedMessage(chunks: number): string {
  let text = '';
  for (let i = 0; i < chunks; i++) text += `t${i}`.padEnd(CHUNK_SIZE - 1, '.') + ' ';
  return text;
}

export const SSE_MESSAGE = chunkedMessage(SSE_CHUNKS);
export const SLOW_MESSAGE = chunkedMessage(SLOW_CHUNKS);

/** The chunks of an echo reply: the message cut into CHUNK_SIZE pieces. */
export function chunksOf(message: string): string[] {
  const chunks: string[] = [];
  for (let i = 0; i < message.length; i += CHUNK_SIZE) chunks.push(message.slice(i, i + CHUNK_SIZE));
  return chunks;
}

/** Chunk `i` of an echo reply, cut on demand (a held stream keeps no array of its chunks). */
export function chunkAt(message: string, i: number): string {
  return message.slice(i * CHUNK_SIZE, (i + 1) * CHUNK_SIZE);
}

/** How many chunks the echo reply of `message` has. */
export function chunkCount(message: string): number {
  return Math.ceil(message.length / CHUNK_SIZE);
}

/** Parent to contender. */
export interface Command {
  id: number;
  cmd: 'heap' | 'cpu' | 'evict' | 'count' | 'snapshot';
  /** Where `snapshot` writes the heap snapshot. */
  path?: string | undefined;
}

/** Contender to parent: the answer to a Command, or the ready message. */
export type Reply =
  | { type: 'ready'; port: number; prefix: string; name: string }
  | { type: 'reply'; id: number; result: number | string | HeapReport | { user: number; system: number } };

export interface HeapReport {
  heapUsed: number;
  external: number;
  rss: number;
}
