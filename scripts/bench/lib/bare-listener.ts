/**
 * The ceiling: a hand-written node:http server doing the same work as the
 * library contenders and nothing more. Parses the path by hand, reads and
 * parses the JSON body, echoes the message as JSON or as the same SSE frames
 * the library writes, and keeps a state object per id (created on first
 * use, like a live agent). No history, no storage, no turn queue: that is
 * the part of a real turn this ceiling leaves out on purpose.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { randomUUID } from 'node:crypto';
import {
  chunkAt, chunkCount, chunksOf, INITIAL_STATE, SLOW_INTERVAL_MS, SLOW_PREFIX, TURN_PREFIX,
} from './protocol.ts';

/** Each id's state object, made on first use (as a live agent would be). */
export const bareStates = new Map<string, { topic: string }>();

function stateOf(id: string): { topic: string } {
  let state = bareStates.get(id);
  if (state === undefined) {
    state = { ...INITIAL_STATE };
    bareStates.set(id, state);
  }
  return state;
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const payload = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(payload) });
  res.end(payload);
}

function readBody(req: IncomingMessage, done: (text: string) => void): void {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const text = chunks.length === 1 ? (chunks[0] as Buffer).toString('utf8') : Buffer.concat(chunks).toString('utf8');
    // The listeners live as long as the request: a held stream must not keep its body's bytes.
    chunks.length = 0;
    done(text);
  });
}

// Like the router's, each event names its turn and its place in it (id: <turn_id>:<seq>).
const done = (turn: string, seq: number): string => `event: done\nid: ${turn}:${seq}\ndata: [DONE]\n\n`;
const event = (turn: string, seq: number, chunk: string): string => `id: ${turn}:${seq}\ndata: ${chunk}\n\n`;

function stream(res: ServerResponse, id: string, message: string): void {
  const turn = randomUUID();
  res.writeHead(200, {
    'Content-Type': 'text/event-stream',
    'Cache-Control': 'no-cache',
    'X-Accel-Buffering': 'no',
    'Turn-Id': turn,
  });
  res.flushHeaders();
  if (id.startsWith(SLOW_PREFIX)) return slow(res, turn, message);
  const chunks = chunksOf(message);
  if (id.startsWith(TURN_PREFIX)) return void perTurn(res, turn, chunks);
  for (let i = 0; i < chunks.length; i++) res.write(event(turn, i + 1, chunks[i] as string));
  res.end(done(turn, chunks.length + 1));
}

async function perTurn(res: ServerResponse, turn: string, chunks: string[]): Promise<void> {
  for (let i = 0; i < chunks.length; i++) {
    if (i > 0) await new Promise(setImmediate);
    if (res.destroyed) return;
    res.write(event(turn, i + 1, chunks[i] as string));
  }
  res.end(done(turn, chunks.length + 1));
}

function slow(res: ServerResponse, turn: string, message: string): void {
  const count = chunkCount(message);
  let next = 0;
  let timer: NodeJS.Timeout | undefined;
  const tick = (): void => {
    if (next === count) return void res.end(done(turn, count + 1));
    res.write(event(turn, next + 1, chunkAt(message, next++)));
    timer = setTimeout(tick, SLOW_INTERVAL_MS);
  };
  res.on('close', () => clearTimeout(timer));
  tick();
}

/** The bare server's request listener (the bare contender's, and what `ab.ts` serves in memory). */
export function bareListener(req: IncomingMessage, res: ServerResponse): void {
  const url = req.url ?? '/';
  const mark = url.indexOf('?');
  const path = mark === -1 ? url : url.slice(0, mark);
  const slash = path.indexOf('/', 1);
  if (slash <= 1) return sendJson(res, 404, { error: 'Not found', code: 'not_found' });
  const id = path.slice(1, slash);
  const action = path.slice(slash);
  if (action === '/state' && req.method === 'GET') return sendJson(res, 200, { agent_id: id, state: stateOf(id) });
  if (action !== '/chat' || req.method !== 'POST') return sendJson(res, 404, { error: 'Not found', code: 'not_found' });
  readBody(req, (text) => {
    let message: unknown;
    try {
      message = (JSON.parse(text) as { message?: unknown }).message;
    } catch {
      return sendJson(res, 400, { error: 'Invalid JSON body', code: 'invalid_json' });
    }
    if (typeof message !== 'string' || message === '') return sendJson(res, 400, { error: 'message missing', code: 'missing_message' });
    stateOf(id);
    if (mark !== -1 && url.includes('stream=true', mark)) return stream(res, id, message);
    const turn = randomUUID();
    res.setHeader('Turn-Id', turn);
    sendJson(res, 200, { agent_id: id, turn_id: turn, response: message });
  });
}
