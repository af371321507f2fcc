/**
 * Holds many slow SSE streams open from this one process, one raw socket
 * each (no HTTP client objects, no parsing beyond counting frames), so
 * 10,000 of them cost the load generator little.
 */
import net from 'node:net';
import { requestBytes } from './raw-http.ts';

export interface HeldStreams {
  /** Streams that answered 200 and sent their first chunk. */
  opened: number;
  /** Streams refused (non-200), closed early or failed to connect; with the first reason. */
  failed: number;
  firstFailure: string | undefined;
  /** `data:` frames received so far, over all streams. */
  frames(): number;
  /** Streams still open. */
  alive(): number;
  close(): void;
}

const DATA = 'data:';

/**
 * Opens `count` streams (`target(i)` is stream i's path), at most `window`
 * connecting at once; resolves once each has sent its first chunk or failed.
 */
export async function holdStreams(port: number, count: number, target: (i: number) => string, body: string, window = 200): Promise<HeldStreams> {
  const sockets: net.Socket[] = [];
  let frames = 0;
  let opened = 0;
  let failed = 0;
  let alive = 0;
  let firstFailure: string | undefined;
  let closing = false;
  const openOne = (i: number): Promise<void> =>
    new Promise<void>((resolve) => {
      let settled = false;
      let headers = false;
      let connected = false;
      let mine = 0;
      const settle = (ok: boolean, why?: string): void => {
        if (settled) return;
        settled = true;
        if (ok) opened++;
        else {
          failed++;
          firstFailure ??= why;
        }
        resolve();
      };
      const socket = net.connect(port, '127.0.0.1');
      sockets.push(socket);
      socket.setNoDelay(true);
      socket.setEncoding('latin1');
      socket.on('connect', () => {
        connected = true;
        alive++;
        socket.write(requestBytes('POST', target(i), port, body, 'text/event-stream'));
      });
      socket.on('data', (text: string) => {
        if (!headers) {
          headers = true;
          if (!text.startsWith('HTTP/1.1 200')) {
            settle(false, text.split('\r\n')[0]);
            socket.destroy();
            return;
          }
        }
        let found = 0;
        for (let at = text.indexOf(DATA); at !== -1; at = text.indexOf(DATA, at + DATA.length)) found++;
        frames += found;
        mine += found;
        if (mine > 0) settle(true);
      });
      socket.on('error', (error) => settle(false, error.message));
      socket.on('close', () => {
        if (connected) alive--;
        if (!closing) settle(false, 'closed before its first chunk');
      });
    });
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < count) await openOne(next++);
  };
  await Promise.all(Array.from({ length: Math.min(window, count) }, worker));
  return {
    opened,
    failed,
    firstFailure,
    frames: () => frames,
    alive: () => alive,
    close: () => {
      closing = true;
      for (const socket of sockets) socket.destroy();
    },
  };
}
