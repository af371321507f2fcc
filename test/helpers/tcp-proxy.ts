/**
 * A TCP proxy on port 0 in front of a real server (Postgres, Redis), whose
 * hooks can hold, drop or cut what crosses it: how the storage tests make a
 * server that hangs, or a connection that dies with a statement's answer.
 */
import net from 'node:net';
import type { TestContext } from 'node:test';

/** One client connection and its upstream connection. */
export interface ProxyLink {
  /** Closes both sides at once, as a network failure would. */
  cut(): void;
  /** Sends bytes to the server now: ones a `toServer` hook kept back, to deliver late. */
  send(bytes: Buffer): void;
}

export interface ProxyHooks {
  /** A new client connection: false leaves it accepted and never answered (no upstream is opened); 'cut' closes it at once, as a server refusing it would. */
  accept?(): boolean | 'cut';
  /** Bytes from the client: false keeps them from the server. */
  toServer?(bytes: Buffer, link: ProxyLink): boolean;
  /** Bytes from the server: false keeps them from the client. */
  toClient?(bytes: Buffer, link: ProxyLink): boolean;
}

/** Starts a proxy to `port` on 127.0.0.1; it and its connections are closed after the test. Resolves with its port. */
export async function tcpProxy(t: TestContext, port: number, hooks: ProxyHooks = {}): Promise<number> {
  const sockets = new Set<net.Socket>();
  const track = (socket: net.Socket): void => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => sockets.delete(socket));
  };
  const server = net.createServer((client) => {
    track(client);
    const accepted = hooks.accept?.() ?? true;
    if (accepted === 'cut') client.destroy();
    if (accepted !== true) return;
    const upstream = net.connect(port, '127.0.0.1');
    track(upstream);
    const link: ProxyLink = {
      cut() {
        client.destroy();
        upstream.destroy();
      },
      send(bytes) {
        upstream.write(bytes);
      },
    };
    client.on('data', (bytes: Buffer) => (hooks.toServer?.(bytes, link) ?? true) && upstream.write(bytes));
    upstream.on('data', (bytes: Buffer) => (hooks.toClient?.(bytes, link) ?? true) && client.write(bytes));
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    for (const socket of sockets) socket.destroy();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return (server.address() as net.AddressInfo).port;
}
