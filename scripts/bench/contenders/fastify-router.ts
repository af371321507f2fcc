/** Our router inside Fastify 5: `app.register(toFastify(router))`. */
import Fastify from 'fastify5';
import { toFastify } from '../../../src/adapters/fastify.ts';
import { AgentRouter } from '../../../src/router/router.ts';
import { benchRegistry, CAPACITY } from './agents.ts';
import { announce } from './ipc.ts';

const router = new AgentRouter(benchRegistry(), { maxStreams: CAPACITY, maxAgents: CAPACITY });
const app = Fastify({ logger: false });
await app.register(toFastify(router));
await app.listen({ port: 0, host: '127.0.0.1' });
const address = app.server.address();
announce('fastify-router', typeof address === 'object' && address !== null ? address.port : 0, '', { count: () => router.pool?.size ?? 0 });
