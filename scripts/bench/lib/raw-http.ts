/**
 * A minimal HTTP/1.1 client over one keep-alive socket, for latency
 * scenarios: one request at a time, timing the first byte of the response,
 * the first SSE `data:` frame and the end. Hand-written because a timing
 * client must add as little as possible (no fetch streams, no agent pool).
 */
import net from 'node:net';
import { now } from './stats.ts';

export interface Timing {
  status: number;
  /** Milliseconds from writing the request to the first byte of the response. */
  firstByte: number;
  /** Milliseconds to the first `data:` line of an SSE body (the end, for a body without one). */
  firstChunk: number;
  /** Milliseconds to the last byte. */
  total: number;
  body: string;
}

const HEADER_END = Buffer.from('\r\n\r\n');
const DATA = Buffer.from('data:');

/** Builds the bytes of one request. */
export function requestBytes(method: 'GET' | 'POST', target: string, port: number, body?: string, accept?: string): Buffer {
  let head = `${method} ${target} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n`;
  if (accept !== undefined) head += `Accept: ${accept}\r\n`;
  if (body !== undefined) head += `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n`;
  return Buffer.from(`${head}\r\n${body ?? ''}`);
}

export class RawConnection {
  readonly #port: number;
  #socket!: net.Socket;
  #buffer: Buffer = Buffer.alloc(0);
  #onData: (() => void) | undefined;
  #closed: Error | undefined;

  private constructor(port: number) {
    this.#port = port;
  }

  static async connect(port: number): Promise<RawConnection> {
    const connection = new RawConnection(port);
    await connection.#open();
    return connection;
  }

  #open(): Promise<void> {
    return new Promise((resolve, reject) => {
      const socket = net.connect(this.#port, '127.0.0.1', () => {
        socket.off('error', reject);
        resolve();
      });
      socket.once('error', reject);
      socket.setNoDelay(true);
      this.#socket = socket;
      this.#buffer = Buffer.alloc(0);
      this.#closed = undefined;
      socket.on('data', (chunk: Buffer) => {
        this.#buffer = this.#buffer.length === 0 ? chunk : Buffer.concat([this.#buffer, chunk]);
        this.#onData?.();
      });
      const close = (error?: Error): void => {
        if (this.#socket !== socket) return;
        this.#closed ??= error ?? new Error('connection closed');
        this.#onData?.();
      };
      socket.on('error', close);
      socket.on('close', () => close());
    });
  }

  close(): void {
    this.#socket.destroy();
  }

  /**
   * Sends one request and reads its whole response (Content-Length or
   * chunked). A connection the server closed while idle (its keep-alive
   * timeout) is reopened first, outside the timing.
   */
  async request(bytes: Buffer): Promise<Timing> {
    if (this.#closed !== undefined) await this.#open();
    try {
      return await this.#exchange(bytes);
    } catch (error) {
      // Closed by the server as the request went out (a keep-alive race): once more on a new connection.
      if (this.#closed === undefined) throw error;
      await this.#open();
      return this.#exchange(bytes);
    }
  }

  #exchange(bytes: Buffer): Promise<Timing> {
    return new Promise<Timing>((resolve, reject) => {
      const start = now();
      let firstByte = -1;
      let firstChunk = -1;
      let headerLength = -1;
      let status = 0;
      let contentLength = -1;
      let chunked = false;
      // For a chunked body: where the next chunk-size line starts, and the decoded parts so far.
      let cursor = 0;
      const parts: Buffer[] = [];
      const finish = (end: number, body: Buffer): void => {
        this.#onData = undefined;
        this.#buffer = this.#buffer.subarray(end);
        const total = now() - start;
        resolve({ status, firstByte, firstChunk: firstChunk < 0 ? total : firstChunk, total, body: body.toString('utf8') });
      };
      const onData = (): void => {
        const buffer = this.#buffer;
        if (buffer.length > 0 && firstByte < 0) firstByte = now() - start;
        if (headerLength < 0) {
          const end = buffer.indexOf(HEADER_END);
          if (end === -1) return this.#check(reject);
          headerLength = end + 4;
          const head = buffer.subarray(0, end).toString('latin1');
          status = Number(head.slice(9, 12));
          const length = /\r\ncontent-length:\s*(\d+)/i.exec(head);
          if (length !== null) contentLength = Number(length[1]);
          chunked = /\r\ntransfer-encoding:\s*chunked/i.test(head);
          cursor = headerLength;
        }
        if (firstChunk < 0 && buffer.indexOf(DATA, headerLength) !== -1) firstChunk = now() - start;
        if (!chunked) {
          if (contentLength < 0) return reject(new Error('response has neither content-length nor chunked encoding'));
          if (buffer.length < headerLength + contentLength) return this.#check(reject);
          return finish(headerLength + contentLength, buffer.subarray(headerLength, headerLength + contentLength));
        }
        for (;;) {
          const lineEnd = buffer.indexOf('\r\n', cursor);
          if (lineEnd === -1) return this.#check(reject);
          const size = parseInt(buffer.subarray(cursor, lineEnd).toString('latin1'), 16);
          if (buffer.length < lineEnd + 2 + size + 2) return this.#check(reject);
          if (size === 0) return finish(lineEnd + 4, Buffer.concat(parts));
          parts.push(buffer.subarray(lineEnd + 2, lineEnd + 2 + size));
          cursor = lineEnd + 2 + size + 2;
        }
      };
      this.#onData = onData;
      this.#socket.write(bytes);
      if (this.#buffer.length > 0) onData();
    });
  }

  #check(reject: (error: Error) => void): void {
    if (this.#closed === undefined) return;
    this.#onData = undefined;
    reject(this.#closed);
  }
}
