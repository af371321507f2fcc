import { readSSE, type SSEEvent } from '../../src/sse/parser.ts';

export interface CollectedSSE {
  events: SSEEvent[];
  /** The data of the plain `message` events, concatenated: the streamed reply. */
  text: string;
  comments: string[];
}

/** Reads a whole SSE response with the spec-following parser. */
export async function collectSSE(res: Response): Promise<CollectedSSE> {
  if (res.body === null) throw new Error('response has no body');
  const events: SSEEvent[] = [];
  const comments: string[] = [];
  for await (const event of readSSE(res.body, { onComment: (c) => comments.push(c) })) events.push(event);
  const text = events.filter((e) => e.event === 'message').map((e) => e.data).join('');
  return { events, text, comments };
}

/** What SPEC.md's naive client does: keep lines starting "data: ", strip 6 characters. */
export function naiveSSEText(raw: string): string {
  return raw
    .split('\n')
    .filter((line) => line.startsWith('data: ') && line !== 'data: [DONE]')
    .map((line) => line.slice(6))
    .join('');
}

/** The raw stream without its `id:` lines (each carries the turn's random id), for tests about the rest of the bytes. */
export function withoutIds(raw: string): string {
  return raw.replace(/^id: [^\n]*\n/gm, '');
}
