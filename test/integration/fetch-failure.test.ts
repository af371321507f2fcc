import assert from 'node:assert/strict';
import net from 'node:net';
import { test } from 'node:test';
import { fetchFailure } from '../../src/lib/fetch-failure.ts';

test('a server speaking another protocol is not_http, from the fetch of this Node', async (t) => {
  const server = net.createServer((socket) => socket.on('data', () => socket.end('SSH-2.0-OpenSSH_9.6\r\n')));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => server.close());
  const error = await fetch(`http://127.0.0.1:${(server.address() as net.AddressInfo).port}/`).then(
    () => assert.fail('fetch answered'),
    (caught: unknown) => caught,
  );
  assert.equal(fetchFailure(error).kind, 'not_http');
});

test("Node 24's shape of it, llhttp's HTTPParserError with no code, is not_http too", () => {
  // As Node 24.21's fetch throws it: a TypeError whose cause is the parser's error, its code undefined.
  const cause = Object.assign(new Error('Response does not match the HTTP/1.1 protocol (Expected HTTP/, RTSP/ or ICE/)'), { name: 'HTTPParserError', code: undefined });
  assert.deepEqual(fetchFailure(new TypeError('fetch failed', { cause })), { kind: 'not_http', code: 'HTTPParserError' });
  assert.deepEqual(fetchFailure(new TypeError('fetch failed', { cause: new Error('something else') })), { kind: 'other', code: undefined });
});
