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
