/**
 * HTTP/1.1 connections held in memory: a Duplex handed to a real
 * `http.Server` with `emit('connection')`, so Node's own parser and
 * ServerResponse serve it, with no socket, no system call and no other
 * process to wake. What a batch of requests costs this process is then the
 * serving code's work alone (plus this client's, the same for every
 * listener), steady enough to compare two builds of `src/` within a few
 * percent.
 */
import { Duplex } from 'node:stream';
import type { Server } from 'node:http';

/** One request of a load: its method, path, and JSON body if any. */
export interface MemoryRequest {
  method: 'GET' | 'POST';
  path: string;
  body?: string | undefined;
  accept?: string | undefined;
}

/** What every response of a batch must be: checked, so a listener that fails is not timed as fast. */
export interface ExpectedReply {
  status: number;
  /** What is wrong with a response's body (as sent: chunked framing included), or undefined when it is right. */
  problem: (request: MemoryRequest, body: string) => string | undefined;
}

const HEAD_END = '\r\n\r\n';
/** The last chunk of a chunked body (an SSE stream's end). */
const LAST_CHUNK = '\r\n0\r\n\r\n';

/** How a response's end is known, read once from its head. */
type Framing = { length: number } | 'chunked';

class MemoryConnection extends Duplex {
  /** Bytes before the head's end was seen. */
  #pending = '';
  #head: string | undefined;
  #framing: Framing | undefined;
  /** The body as it came, write by write: joined once, when the response is whole. */
  #parts: string[] = [];
  #bodyLength = 0;
  /** The body's last few characters, to spot a chunked body's end without joining it. */
  #tail = '';
  #request: MemoryRequest | undefined;
  #onReply: ((error: Error | undefined) => void) | undefined;
  readonly #expected: ExpectedReply;

  constructor(expected: ExpectedReply) {
    super();
    this.#expected = expected;
  }

  override _read(): void {}

  override _write(chunk: Buffer, _encoding: string, callback: () => void): void {
    this.#take(chunk);
    callback();
  }

  override _writev(chunks: Array<{ chunk: Buffer }>, callback: () => void): void {
    for (const { chunk } of chunks) this.#take(chunk);
    callback();
  }

  /** Sends one request; `onReply` runs once its whole response arrived (with an error if it was not the expected one). */
  send(request: MemoryRequest, onReply: (error: Error | undefined) => void): void {
    this.#request = request;
    this.#onReply = onReply;
    const accept = request.accept === undefined ? '' : `Accept: ${request.accept}\r\n`;
    const text = request.body === undefined
      ? `${request.method} ${request.path} HTTP/1.1\r\nHost: bench\r\n${accept}\r\n`
      : `${request.method} ${request.path} HTTP/1.1\r\nHost: bench\r\n${accept}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(request.body)}\r\n\r\n${request.body}`;
    // On a later turn of the event loop, as bytes from a socket arrive.
    setImmediate(() => this.push(text));
  }

  /**
   * One write of the server's. Constant work per write once the head is
   * read (no rescanning of what came before): a server that writes a reply
   * in 64 writes must not make this client's share of the CPU grow with
   * the square of them, or the ratios would measure the client.
   */
  #take(chunk: Buffer | string): void {
    let text = typeof chunk === 'string' ? chunk : chunk.toString('latin1');
    if (this.#head === undefined) {
      this.#pending += text;
      const headEnd = this.#pending.indexOf(HEAD_END);
      if (headEnd === -1) return;
      const head = (this.#head = this.#pending.slice(0, headEnd));
      text = this.#pending.slice(headEnd + HEAD_END.length);
      this.#pending = '';
      const length = /\r\ncontent-length: *(\d+)/i.exec(head)?.[1];
      if (length !== undefined) this.#framing = { length: Number(length) };
      else if (/\r\ntransfer-encoding: *chunked/i.test(head)) this.#framing = 'chunked';
      else return this.#finish(`a response with neither Content-Length nor chunked encoding`);
    }
    if (text !== '') {
      this.#parts.push(text);
      this.#bodyLength += text.length;
      this.#tail = (this.#tail + text).slice(-LAST_CHUNK.length);
    }
    const framing = this.#framing;
    const whole = framing === 'chunked' ? this.#tail === LAST_CHUNK : this.#bodyLength >= (framing as { length: number }).length;
    if (whole) this.#finish(undefined);
  }

  /** The response is whole (or unreadable: `unreadable` says why): checks it, and starts on the next. */
  #finish(unreadable: string | undefined): void {
    const head = this.#head ?? this.#pending;
    const body = this.#parts.join('');
    this.#head = this.#framing = undefined;
    this.#pending = this.#tail = '';
    this.#parts = [];
    this.#bodyLength = 0;
    const request = this.#request as MemoryRequest;
    const status = Number(head.slice(9, 12));
    const problem = unreadable ?? (status === this.#expected.status ? this.#expected.problem(request, body) : `status ${status}`);
    this.#done(problem === undefined ? undefined : new Error(`${request.method} ${request.path}: ${problem}; the response began ${`${head}\r\n\r\n${body}`.slice(0, 300)}`));
  }

  #done(error: Error | undefined): void {
    const onReply = this.#onReply;
    this.#onReply = undefined;
    onReply?.(error);
  }
}

/** `connections` keep-alive connections to `server`, each sending its next request as soon as the last was answered. */
export class MemoryLoad {
  readonly #connections: MemoryConnection[];

  constructor(server: Server, connections: number, expected: ExpectedReply) {
    this.#connections = Array.from({ length: connections }, () => new MemoryConnection(expected));
    for (const connection of this.#connections) server.emit('connection', connection);
  }

  /** Sends `count` requests in all, `next(connection, k)` the k-th of a connection; resolves once all were answered as expected. */
  run(count: number, next: (connection: number, k: number) => MemoryRequest): Promise<void> {
    return new Promise((resolve, reject) => {
      let sent = 0;
      let answered = 0;
      let failed = false;
      const sendOn = (index: number, k: number): void => {
        if (sent === count) return;
        sent++;
        (this.#connections[index] as MemoryConnection).send(next(index, k), (error) => {
          if (failed) return;
          if (error !== undefined) {
            failed = true;
            return reject(error);
          }
          if (++answered === count) return resolve();
          sendOn(index, k + 1);
        });
      };
      for (let index = 0; index < this.#connections.length; index++) sendOn(index, 0);
    });
  }

  close(): void {
    for (const connection of this.#connections) connection.destroy();
  }
}
