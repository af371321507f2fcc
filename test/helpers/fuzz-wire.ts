import http from 'node:http';
import net from 'node:net';

/** One answer as the client saw it. */
export interface WireReply {
  status: number;
  /** Lower-case names; repeated headers joined with ", ". */
  headers: Record<string, string>;
  /** The body, de-chunked, decoded as UTF-8. */
  body: string;
  /** The client hung up (after the headers on purpose, or by half-closing early), so the body is not whole and is not checked. */
  cut: boolean;
}

/** A request Node's own client can send (a path and headers it accepts). */
export interface HttpCase {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: Buffer | undefined;
  /** Hang up as soon as the response headers arrive (a client that goes away mid-answer). */
  cutAfterHeaders: boolean;
}

/** Bytes written on a fresh socket, for what Node's client refuses to send. */
export interface RawCase {
  bytes: Buffer;
  /** The request is HEAD: answers carry headers only. */
  head: boolean;
  /**
   * `write`: half-close right after writing (the request is truncated or
   * garbage: the server must notice the end). `answer`: half-close once the
   * first answer is complete (a closing client loses an answer still being
   * made, so a complete request waits for it).
   */
  finAfter: 'write' | 'answer';
}

/**
 * Sends one request over a keep-alive `agent`; rejects if no answer comes
 * within `timeoutMs` (a hang is a failure, never a wait).
 */
export function sendHttp(agent: http.Agent, port: number, request: HttpCase, timeoutMs: number): Promise<WireReply> {
  return new Promise<WireReply>((resolve, reject) => {
    // Node's client sends a GET or HEAD body with no length at all (so the server reads it as the next request): always declare it.
    const headers = request.body === undefined ? request.headers : { ...request.headers, 'content-length': String(request.body.length) };
    const req = http.request({ host: '127.0.0.1', port, agent, method: request.method, path: request.path, headers });
    const timer = setTimeout(() => req.destroy(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    const finish = (result: WireReply | Error): void => {
      clearTimeout(timer);
      if (result instanceof Error) reject(result);
      else resolve(result);
    };
    req.on('error', finish);
    req.on('response', (res) => {
      const base = { status: res.statusCode ?? 0, headers: flatHeaders(res.headers) };
      if (request.cutAfterHeaders) {
        res.destroy();
        finish({ ...base, body: '', cut: true });
        return;
      }
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('error', finish);
      res.on('end', () => finish({ ...base, body: Buffer.concat(chunks).toString('utf8'), cut: false }));
    });
    req.end(request.body);
  });
}

/**
 * Writes raw bytes on a new connection and collects every answer until the
 * server closes it; rejects if that takes more than `timeoutMs`.
 */
export function sendRaw(port: number, request: RawCase, timeoutMs: number): Promise<WireReply[]> {
  return new Promise<WireReply[]>((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let received = '';
    let halfClosed = false;
    const halfClose = (): void => {
      if (halfClosed) return;
      halfClosed = true;
      socket.end();
    };
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`raw connection still open after ${timeoutMs} ms; got ${JSON.stringify(received.slice(0, 300))}`));
    }, timeoutMs);
    socket.setEncoding('latin1'); // one char per byte, so lengths count bytes
    socket.on('data', (text: string) => {
      received += text;
      if (request.finAfter === 'answer' && parseResponses(received, false, request.head).replies.length > 0) halfClose();
    });
    // A reset after the server refused the request is an ending like any other.
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      const { replies, rest, toEof } = parseResponses(received, true, request.head);
      // A client that half-closes loses what the server had not yet sent (Node ends the socket), so the
      // last answer may be cut short then (it must still begin as an HTTP answer).
      const last = replies[replies.length - 1];
      if (halfClosed && toEof && last !== undefined) last.cut = true;
      const cut = halfClosed && rest !== '' ? parseCut(rest) : undefined;
      if (cut !== undefined && cut !== 'nothing') replies.push(cut);
      if (rest !== '' && cut === undefined) reject(new Error(`unparseable bytes from the server: ${JSON.stringify(rest.slice(0, 300))}`));
      else resolve(replies);
    });
    socket.write(request.bytes);
    if (request.finAfter === 'write') halfClose();
  });
}

/**
 * Splits raw HTTP/1.1 responses (`latin1` text): bodies by content-length,
 * chunked, or (with `eof`) up to the end of the connection; none for HEAD,
 * 1xx, 204 and 304. Interim 1xx answers (`100 Continue`) are skipped.
 * `rest` holds what is not (yet) a whole response; `toEof` tells that the
 * last body had no length and ran to the end of the connection.
 */
export function parseResponses(text: string, eof: boolean, head: boolean): { replies: WireReply[]; rest: string; toEof: boolean } {
  const replies: WireReply[] = [];
  let at = 0;
  let toEof = false;
  while (at < text.length) {
    const headEnd = text.indexOf('\r\n\r\n', at);
    if (headEnd === -1) break;
    const parsed = parseHead(text.slice(at, headEnd));
    if (parsed === undefined) break;
    const { status, headers } = parsed;
    const bodiless = head || status < 200 || status === 204 || status === 304;
    const body = bodiless ? { text: '', end: headEnd + 4 } : readBody(text, headEnd + 4, headers, eof);
    if (body === undefined) break;
    if (status >= 200) replies.push({ status, headers, body: Buffer.from(body.text, 'latin1').toString('utf8'), cut: false });
    toEof = 'toEof' in body;
    at = body.end;
  }
  return { replies, rest: text.slice(at), toEof };
}

/** An answer cut short: its status and headers (`cut`), 'nothing' when not even they arrived, undefined when it is not HTTP. */
function parseCut(rest: string): WireReply | 'nothing' | undefined {
  const headEnd = rest.indexOf('\r\n\r\n');
  if (headEnd === -1) return rest.startsWith('HTTP/1.') || 'HTTP/1.'.startsWith(rest) ? 'nothing' : undefined;
  const head = parseHead(rest.slice(0, headEnd));
  return head === undefined ? undefined : { ...head, body: '', cut: true };
}

/** The status line and headers (lower-case names, repeats joined with ", "). */
function parseHead(text: string): { status: number; headers: Record<string, string> } | undefined {
  const [statusLine = '', ...lines] = text.split('\r\n');
  const match = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine);
  if (match === null) return undefined;
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
  }
  return { status: Number(match[1]), headers };
}

function readBody(text: string, start: number, headers: Record<string, string>, eof: boolean): { text: string; end: number; toEof?: true } | undefined {
  if (headers['transfer-encoding'] === 'chunked') {
    let at = start;
    let body = '';
    while (true) {
      const lineEnd = text.indexOf('\r\n', at);
      if (lineEnd === -1) return undefined;
      const size = Number.parseInt(text.slice(at, lineEnd), 16);
      if (Number.isNaN(size)) return undefined;
      if (size === 0) {
        // Trailers (none here) end with an empty line.
        const end = text.indexOf('\r\n', lineEnd + 2);
        return end === -1 ? undefined : { text: body, end: end + 2 };
      }
      if (text.length < lineEnd + 2 + size + 2) return undefined;
      body += text.slice(lineEnd + 2, lineEnd + 2 + size);
      at = lineEnd + 2 + size + 2;
    }
  }
  const length = headers['content-length'];
  if (length !== undefined) {
    const end = start + Number(length);
    return text.length < end ? undefined : { text: text.slice(start, end), end };
  }
  // No length: the body runs to the end of the connection (Node's own 4xx answers have none).
  return eof ? { text: text.slice(start), end: text.length, toEof: true } : undefined;
}

function flatHeaders(headers: http.IncomingHttpHeaders): Record<string, string> {
  const flat: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined) flat[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  return flat;
}

/**
 * Runs `work` over `items` with at most `concurrency` at once, in order of
 * start; stops starting new ones once `deadline` (ms since epoch) passed.
 * Resolves with how many ran.
 */
export async function runBounded<T>(items: Iterable<T>, concurrency: number, deadline: number, work: (item: T, index: number) => Promise<void>): Promise<number> {
  const iterator = items[Symbol.iterator]();
  let index = 0;
  const worker = async (): Promise<void> => {
    while (Date.now() < deadline) {
      const next = iterator.next();
      if (next.done === true) return;
      await work(next.value, index++);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return index;
}
