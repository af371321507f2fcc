/**
 * The ceiling: a hand-written node:http server doing the same work as the
 * library contenders and nothing more (see lib/bare-listener.ts).
 */
import http from 'node:http';
import { bareListener, bareStates } from '../lib/bare-listener.ts';
import { announce, listen } from './ipc.ts';

const server = http.createServer(bareListener);

announce('bare', await listen(server), '', {
  count: () => bareStates.size,
  evict: () => bareStates.clear(),
});
