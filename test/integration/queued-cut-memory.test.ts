/**
 * Requests queued behind a long action and cut while they wait (the client
 * left, or turnTimeout) must not stay in memory until the action ends: on a
 * single-agent router an action that never settles would otherwise keep
 * every later request's response and socket for good.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { test } from 'node:test';
import { setImmediate as turn } from 'node:timers/promises';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Agent } from '../../src/agent/agent.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { echoModel } from '../../src/models/echo.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { listen } from '../helpers/listen.ts';
import { noTurnId } from '../helpers/turns.ts';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const QUEUED = 40;

/** Opens `POST /chat?stream=events` on a raw socket and leaves once `turn.started` came (sent while the turn still waits). */
function openAndLeave(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const body = JSON.stringify({ message: 'hi' });
    let got = '';
    socket.on('data', (chunk) => {
      got += chunk;
      if (got.includes('turn.started')) socket.destroy();
    });
    socket.on('close', () => (got.includes('turn.started') ? resolve() : reject(new Error(`no turn.started: ${got}`))));
    socket.on('error', () => undefined);
    socket.write(`POST /chat?stream=events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  });
}

test('streams cut while queued behind a running action are collected before the action ends', async (t) => {
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  let holding!: () => void;
  const started = new Promise<void>((resolve) => (holding = resolve));
  class Holder extends Agent {
    static override actions = ['hold'];
    constructor() {
      super('holder', { model: echoModel(), storage: new MemoryStorage() });
    }
    async hold(): Promise<string> {
      holding();
      await held;
      return 'done';
    }
  }
  const router = new AgentRouter(new Holder(), { logger: { error: () => undefined } });
  const routerListener = router.toRequestListener();
  const collected = new FinalizationRegistry<void>(() => void freed++);
  let freed = 0;
  let closed = 0;
  let allClosed!: () => void;
  const queuedClosed = new Promise<void>((resolve) => (allClosed = resolve));
  const { port, close } = await listen((req: http.IncomingMessage, res: http.ServerResponse) => {
    if (req.url?.startsWith('/chat')) {
      collected.register(res);
      res.on('close', () => void (++closed === QUEUED && allClosed()));
    }
    routerListener(req, res);
  });
  t.after(close);

  const action = fetch(`http://127.0.0.1:${port}/invoke`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ method: 'hold' }),
  });
  await started;
  for (let i = 0; i < QUEUED; i++) await openAndLeave(port);
  await queuedClosed;
  for (let i = 0; i < 20 && freed < QUEUED; i++) {
    await turn();
    gc();
  }
  // Before: none was freed, each kept (with its socket) by the agent's queue until the action ended.
  assert.equal(freed, QUEUED, `${QUEUED - freed} of ${QUEUED} cut requests still in memory while the action runs`);

  release();
  const answer = await action;
  assert.deepEqual(noTurnId(await answer.json()), { agent_id: 'holder', result: 'done' });
  // The agent is free again: the cut turns left nothing in its queue.
  const next = await fetch(`http://127.0.0.1:${port}/chat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"message":"next"}' });
  assert.deepEqual(noTurnId(await next.json()), { agent_id: 'holder', response: 'next' });
});
