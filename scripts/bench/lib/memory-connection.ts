/**
 * HTTP/1.1 connections held in memory: a Duplex handed to a real
 * `http.Server` with `emit('connection')`, so Node's own parser and
 * ServerResponse serve it, with no socket, no system call and no other
 * process to wake. What a batch of requests costs this process is then the
 * serving code's user-space work alone (plus this client's, the same for
 * every listener), steady enough to compare two builds of `src/` within 1%.
 */
import { Duplex } from 'node:stream';
import type { Server } from 'node:http';

/** One request of a load: its method, path, and JSON body if any. */
export interface MemoryRequest {
  method: 'GET' | 'POST';
  path: string;
  body?: string | undefined;
}

/** What every response of a batch must be: checked, so a listener that fails is not timed as fast. */
export interface ExpectedReply {
  status: number;
  /** A prefix of the JSON body, e.g. `{"agent_id":"chat-0-0","response":`. */
  bodyStartsWith: (request: MemoryRequest) => string;
}

const HEAD_END = '\r\n\r\n';

class MemoryConnection extends Duplex {
  #received = '';
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
    const text = request.body === undefined
      ? `${request.method} ${request.path} HTTP/1.1\r\nHost: bench\r\n\r\n`
      : `${request.method} ${request.path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(request.body)}\r\n\r\n${request.body}`;
    // On a later turn of the event loop, as bytes from a socket arrive.
    setImmediate(() => this.push(text));
  }

  #take(chunk: Buffer | string): void {
    this.#received += typeof chunk === 'string' ? chunk : chunk.toString('latin1');
    const headEnd = this.#received.indexOf(HEAD_END);
    if (headEnd === -1) return;
    const length = /\r\ncontent-length: *(\d+)/i.exec(this.#received.slice(0, headEnd))?.[1];
    if (length === undefined) return this.#done(new Error(`a response without Content-Length: ${this.#received.slice(0, 200)}`));
    if (this.#received.length < headEnd + HEAD_END.length + Number(length)) return;
    const received = this.#received;
    this.#received = '';
    const request = this.#request as MemoryRequest;
    const status = Number(received.slice(9, 12));
    const body = received.slice(headEnd + HEAD_END.length);
    const wanted = this.#expected.bodyStartsWith(request);
    this.#done(status === this.#expected.status && body.startsWith(wanted)
      ? undefined
      : new Error(`${request.method} ${request.path} answered ${status} ${body.slice(0, 200)}; expected ${this.#expected.status} ${wanted}`));
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
