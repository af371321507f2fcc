/** Small fetch wrappers so tests read as the requests they make. */
import http from 'node:http';

export interface JsonReply {
  status: number;
  headers: Headers;
  body: any;
}

export async function postJson(url: string, body: unknown, headers: Record<string, string> = {}): Promise<JsonReply> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, body: await res.json() };
}

export async function getJson(url: string, headers: Record<string, string> = {}): Promise<JsonReply> {
  const res = await fetch(url, { headers });
  return { status: res.status, headers: res.headers, body: await res.json() };
}

export function streamChat(url: string, message: string, init: { signal?: AbortSignal; query?: string } = {}): Promise<Response> {
  return fetch(`${url}${init.query ?? '?stream=true'}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({ message }),
    ...(init.signal === undefined ? {} : { signal: init.signal }),
  });
}

/**
 * POSTs `bytes` under `Transfer-Encoding: {coding}` (fetch cannot set it):
 * Node's client frames them chunked, as the coding's last step says.
 */
export function postTransferCoded(url: string, bytes: Buffer, coding: string): Promise<Response> {
  return new Promise((resolve, reject) => {
    const request = http.request(url, { method: 'POST', headers: { 'content-type': 'application/json', 'transfer-encoding': coding } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve(new Response(Buffer.concat(chunks), { status: res.statusCode ?? 0, headers: res.headers as Record<string, string> })));
      res.on('error', reject);
    });
    request.on('error', reject);
    request.end(bytes);
  });
}

/** A promise with its resolve function outside, for tests that hold a model mid-turn. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** A raw HTTP/1.1 `POST path` with a JSON `{message}` body, to write back to back with others (pipelining). */
export function rawChatPost(path: string, message = 'go'): string {
  const body = JSON.stringify({ message });
  return `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

/** Checks `condition` every 20 ms until it holds or `ms` have passed; the caller asserts what it then reads. */
export async function pollUntil(condition: () => boolean, ms: number): Promise<void> {
  const startedAt = Date.now();
  while (!condition() && Date.now() - startedAt < ms) await new Promise((resolve) => setTimeout(resolve, 20));
}
