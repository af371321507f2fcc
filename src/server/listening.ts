import type { Server } from 'node:http';

// The standalone server's listening socket: errors on listen, and closing without resetting requests in flight.

/**
 * Stops accepting connections, calling `done` once every one is closed. http.Server's close()
 * also destroys idle keep-alive connections at once, resetting any request already on its way in
 * (ECONNRESET: the client cannot tell whether its POST ran); #drain closes those after a grace.
 */
export function stopAccepting(server: Server, done: () => void): void {
  server.closeIdleConnections = () => {};
  try {
    server.close(() => done());
  } finally {
    Reflect.deleteProperty(server, 'closeIdleConnections');
  }
}

export function openConnections(server: Server): Promise<number> {
  return new Promise((resolve) => server.getConnections((error, count) => resolve(error === null ? count : 0)));
}

export function listenError(error: NodeJS.ErrnoException, host: string, port: number): Error {
  const where = `${host.includes(':') ? `[${host}]` : host}:${port}`;
  const message = {
    EADDRINUSE: `${where} is already in use; stop the other process or choose another port`,
    EACCES: `permission denied to listen on ${where}; ports below 1024 need privileges, choose another port`,
    EADDRNOTAVAIL: `${host} is not an address of this machine; use 127.0.0.1 or 0.0.0.0`,
    ENOTFOUND: `cannot resolve host ${JSON.stringify(host)}`,
  }[error.code ?? ''] ?? `cannot listen on ${where}: ${error.message}`;
  return Object.assign(new Error(`AgentServer.serve: ${message}`, { cause: error }), { code: error.code });
}
