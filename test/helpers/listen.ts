import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Listening {
  server: http.Server;
  url: string;
  port: number;
  close: () => Promise<void>;
}

/** Serves a request listener on 127.0.0.1, port 0; `close` also drops keep-alive sockets. */
export async function listen(listener: http.RequestListener): Promise<Listening> {
  const server = http.createServer(listener);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    server,
    port,
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
