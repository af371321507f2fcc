import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { bodyParser } from '@koa/bodyparser';
import express5 from 'express5';
import fastify5 from 'fastify5';
import Koa3 from 'koa3';
import { toExpress } from '../../src/adapters/express.ts';
import { toFastify } from '../../src/adapters/fastify.ts';
import { toKoa } from '../../src/adapters/koa.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentServer } from '../../src/server/server.ts';
import { MemoryStorage } from '../../src/storage/memory.ts';
import { echoOn } from '../helpers/agents.ts';
import { listen } from '../helpers/listen.ts';
import { BODY_LIMIT, makeRegistryRouter, post, postChunked } from './adapters-shared.ts';

/**
 * `bodyLimit` is the largest body taken: a body of exactly that many bytes
 * is served, one byte more is 413, whether its length is declared
 * (Content-Length) or only known once read (chunked), on every host.
 */

/** A chat body of exactly `bytes` bytes. */
function chatOf(bytes: number): string {
  const text = JSON.stringify({ message: '' });
  return JSON.stringify({ message: 'a'.repeat(bytes - text.length) });
}

/** Serves the fixture router on a host; resolves with the URL of a chat route. */
type Host = (t: TestContext) => Promise<string>;

const hosts: Array<[string, Host]> = [
  ['toRequestListener()', async (t) => {
    const { url, close } = await listen(makeRegistryRouter().router.toRequestListener());
    t.after(close);
    return `${url}/counter-1/chat`;
  }],
  ['AgentServer', async (t) => {
    const registry = new AgentRegistry();
    registry.register('counter-[0-9]+', echoOn(new MemoryStorage()));
    const server = new AgentServer(registry, { bodyLimit: BODY_LIMIT });
    await server.serve(0);
    t.after(() => server.close());
    return `${server.url}/agent/counter-1/chat`;
  }],
  ['Express, no parser', async (t) => {
    const app = express5();
    app.use('/api', toExpress(makeRegistryRouter().router));
    const { url, close } = await listen(app);
    t.after(close);
    return `${url}/api/counter-1/chat`;
  }],
  ['Express after express.json()', async (t) => {
    const app = express5();
    app.use(express5.json());
    app.use('/api', toExpress(makeRegistryRouter().router));
    const { url, close } = await listen(app);
    t.after(close);
    return `${url}/api/counter-1/chat`;
  }],
  ['Koa, no parser', async (t) => {
    const app = new Koa3();
    app.use(toKoa(makeRegistryRouter({ prefix: '/api' }).router));
    const { url, close } = await listen(app.callback());
    t.after(close);
    return `${url}/api/counter-1/chat`;
  }],
  ['Koa after @koa/bodyparser', async (t) => {
    const app = new Koa3();
    app.use(bodyParser());
    app.use(toKoa(makeRegistryRouter({ prefix: '/api' }).router));
    const { url, close } = await listen(app.callback());
    t.after(close);
    return `${url}/api/counter-1/chat`;
  }],
  ['Fastify', async (t) => {
    const app = fastify5({ forceCloseConnections: true });
    await app.register(toFastify(makeRegistryRouter().router), { prefix: '/api' });
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    t.after(() => app.close());
    return `${url}/api/counter-1/chat`;
  }],
];

for (const [name, host] of hosts) {
  test(`${name}: a body of exactly bodyLimit bytes is served and one byte more is 413, with Content-Length and chunked`, async (t) => {
    const chat = await host(t);
    for (const [framing, send] of [['Content-Length', post], ['chunked', postChunked]] as const) {
      const exact = chatOf(BODY_LIMIT);
      assert.equal(Buffer.byteLength(exact), BODY_LIMIT);
      const served = await send(chat, exact);
      const reply = await served.json();
      assert.equal(served.status, 200, `${framing}, exactly the limit: ${JSON.stringify(reply)}`);
      assert.equal(reply.response, JSON.parse(exact).message);

      const refused = await send(chat, chatOf(BODY_LIMIT + 1));
      assert.equal(refused.status, 413, `${framing}, one byte over`);
      assert.equal((await refused.json()).code, 'body_too_large');
    }
  });
}
