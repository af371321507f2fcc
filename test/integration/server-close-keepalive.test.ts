import assert from 'node:assert/strict';
import net from 'node:net';
import { test } from 'node:test';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentServer } from '../../src/server/server.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { echoOn } from '../helpers/agents.ts';

/**
 * A request already sent on an open keep-alive connection when close()
 * begins is answered (served, or 503 shutting_down), never reset: the
 * client could not tell whether its POST ran.
 */

const CONNECTIONS = 60;
/** A chat POST to write on a raw connection (AgentServer on loopback answers Host: localhost). */
function rawChatPost(path: string, message: string): string {
  const body = JSON.stringify({ message });
  return `POST ${path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

/** One complete response: its head, then a body of the Content-Length it declares. */
const RESPONSE = /HTTP\/1\.1 (\d{3}) [^]*?content-length: (\d+)\r\n[^]*?\r\n\r\n/i;

interface Connection {
  socket: net.Socket;
  received: string;
  error: string | undefined;
  closed: Promise<void>;
  /** Resolves once `received` holds `count` complete responses. */
  responses: (count: number) => Promise<void>;
}

function complete(text: string): string[] {
  const statuses: string[] = [];
  let rest = text;
  for (;;) {
    const match = RESPONSE.exec(rest);
    if (match === null) return statuses;
    const end = match.index + match[0].length + Number(match[2]);
    if (rest.length < end) return statuses;
    statuses.push(match[1] as string);
    rest = rest.slice(end);
  }
}

function connect(port: number): Promise<Connection> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const waiters = new Set<() => void>();
    const connection: Connection = {
      socket,
      received: '',
      error: undefined,
      closed: new Promise((done) => socket.on('close', () => {
        for (const wake of waiters) wake();
        done();
      })),
      responses: (count) => new Promise((done, fail) => {
        const check = (): void => {
          if (complete(connection.received).length >= count) {
            waiters.delete(check);
            done();
          } else if (socket.destroyed) {
            waiters.delete(check);
            fail(new Error(`closed before response ${count} (${connection.error ?? 'no error'}); received ${JSON.stringify(connection.received.slice(-300))}`));
          }
        };
        waiters.add(check);
        check();
      }),
    };
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => {
      connection.received += chunk;
      for (const wake of waiters) wake();
    });
    socket.on('error', (error: NodeJS.ErrnoException) => (connection.error ??= error.code));
    socket.once('connect', () => resolve(connection));
    socket.once('error', reject);
  });
}

for (const drainDelay of [0, 0.05]) {
  test(`requests written on ${CONNECTIONS} keep-alive connections just as close() begins are all answered, none reset (drainDelay ${drainDelay})`, async (t) => {
    const registry = new AgentRegistry();
    registry.register('bot-[0-9]+', echoOn(new MemoryStorage()));
    const server = new AgentServer(registry, { drainDelay });
    await server.serve(0);
    t.after(() => server.close());
    const connections = await Promise.all(Array.from({ length: CONNECTIONS }, () => connect(server.port as number)));
    t.after(() => {
      for (const connection of connections) connection.socket.destroy();
    });
    // Each connection served one request, and is now open and idle.
    connections.forEach((connection, i) => connection.socket.write(rawChatPost(`/agent/bot-${i}/chat`, 'first')));
    await Promise.all(connections.map((connection) => connection.responses(1)));

    // Half written before close() in this same tick (already on the wire, unread), half right after it.
    connections.slice(0, CONNECTIONS / 2).forEach((connection, i) => connection.socket.write(rawChatPost(`/agent/bot-${i}/chat`, 'second')));
    const closing = server.close();
    connections.slice(CONNECTIONS / 2).forEach((connection, i) => connection.socket.write(rawChatPost(`/agent/bot-${i}/chat`, 'second')));
    await closing;
    await Promise.all(connections.map((connection) => connection.closed));

    const outcomes = new Map<string, number>();
    for (const connection of connections) {
      const statuses = complete(connection.received);
      const second = statuses[1] ?? `no answer (${connection.error ?? 'closed'})`;
      outcomes.set(second, (outcomes.get(second) ?? 0) + 1);
    }
    const answered = [...outcomes].filter(([status]) => status === '200' || status === '503').reduce((sum, [, n]) => sum + n, 0);
    assert.equal(answered, CONNECTIONS, `outcomes of the second requests: ${JSON.stringify(Object.fromEntries(outcomes))}`);
    // During drainDelay the server serves as usual.
    if (drainDelay > 0) assert.deepEqual(Object.fromEntries(outcomes), { 200: CONNECTIONS });
    for (const connection of connections) {
      if (complete(connection.received)[1] === '503') assert.match(connection.received, /"code":"shutting_down"/);
    }
  });
}
