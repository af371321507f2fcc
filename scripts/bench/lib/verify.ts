/**
 * Checks, before any measurement, that a contender answers the scenario's
 * request with exactly the expected reply: the contenders must do the same
 * work, or their numbers compare nothing.
 */
import { readSSE } from '../../../src/sse/parser.ts';
import type { Contender } from './contender.ts';
import { CHAT_MESSAGE, INITIAL_STATE } from './protocol.ts';

function mismatch(contender: Contender, what: string, got: string): Error {
  return new Error(`${contender.name}: wrong ${what} reply: ${got.slice(0, 200)}`);
}

export async function verifyChat(contender: Contender, id: string): Promise<void> {
  const res = await fetch(`${contender.base}/${id}/chat`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ message: CHAT_MESSAGE }),
  });
  const text = await res.text();
  // Every contender names the turn (a fresh random id), as the router does.
  const reply = text.replace(/^(\{"agent_id":"[^"]*",)"turn_id":"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",/, '$1');
  if (res.status !== 200 || reply !== JSON.stringify({ agent_id: id, response: CHAT_MESSAGE })) throw mismatch(contender, 'chat', `${res.status} ${text}`);
}

export async function verifyState(contender: Contender, id: string): Promise<void> {
  const res = await fetch(`${contender.base}/${id}/state`);
  const text = await res.text();
  if (res.status !== 200 || text !== JSON.stringify({ agent_id: id, state: INITIAL_STATE })) throw mismatch(contender, 'state', `${res.status} ${text}`);
}

/** A stream must hold `chunks` data events that join to the message, then `event: done`. */
export async function verifyStream(contender: Contender, id: string, message: string, chunks: number): Promise<void> {
  const res = await fetch(`${contender.base}/${id}/chat?stream=true`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({ message }),
  });
  if (res.status !== 200 || res.headers.get('content-type') !== 'text/event-stream' || res.body === null) {
    throw mismatch(contender, 'stream', `${res.status} ${res.headers.get('content-type')} ${await res.text()}`);
  }
  const events = [];
  for await (const event of readSSE(res.body)) events.push(event);
  const data = events.filter((event) => event.event === 'message');
  const last = events[events.length - 1];
  if (data.length !== chunks || data.map((event) => event.data).join('') !== message || last?.event !== 'done') {
    throw mismatch(contender, 'stream', `${data.length} data events, last ${last?.event}: ${data.map((event) => event.data).join('')}`);
  }
}
