import net from 'node:net';

/**
 * Writes `text` on a new connection to 127.0.0.1:`port` and resolves with
 * everything the server sent once it closes the connection (send
 * `Connection: close`, or expect the server to close it).
 */
export function rawExchange(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let received = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => (received += chunk));
    socket.on('error', reject);
    socket.on('close', () => resolve(received));
    socket.write(text);
  });
}

/** The status and the JSON body of the one response in `received`. */
export function parseResponse(received: string): { status: number; head: string; body: any } {
  const split = received.indexOf('\r\n\r\n');
  const head = received.slice(0, split);
  const text = received.slice(split + 4);
  return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1]), head, body: text === '' ? undefined : JSON.parse(text) };
}
