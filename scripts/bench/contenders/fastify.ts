/** Fastify 5, native routes (its router, its JSON parser, its serializer). */
import Fastify from 'fastify5';
import { announce } from './ipc.ts';
import { BAD_MESSAGE, chatReply, nativeHooks, stateReply } from './native-handlers.ts';

const app = Fastify({ logger: false });
app.post<{ Params: { id: string } }>('/:id/chat', async (request, reply) => {
  const body = chatReply(request.params.id, request.body);
  if (body === undefined) return reply.code(400).send(BAD_MESSAGE);
  return body;
});
app.get<{ Params: { id: string } }>('/:id/state', async (request) => stateReply(request.params.id));
await app.listen({ port: 0, host: '127.0.0.1' });
const address = app.server.address();
announce('fastify', typeof address === 'object' && address !== null ? address.port : 0, '', nativeHooks);
