/** Our standalone AgentServer (its own http.Server, routes under `/agent`). */
import { AgentServer } from '../../../src/server/server.ts';
import { benchRegistry, CAPACITY } from './agents.ts';
import { announce } from './ipc.ts';

function create(): AgentServer {
  try {
    return new AgentServer(benchRegistry(), { maxAgents: CAPACITY, maxStreams: CAPACITY });
  } catch (error) {
    // An AgentServer that does not (yet) take maxStreams: its router's default cap then applies.
    if (!(error instanceof TypeError) || !error.message.includes('maxStreams')) throw error;
    console.error('bench server contender: AgentServer refused maxStreams; running with its default stream cap');
    return new AgentServer(benchRegistry(), { maxAgents: CAPACITY });
  }
}

const server = create();
await server.serve(0);
announce('server', server.port as number, '/agent', {
  count: () => server.pool.size,
  evict: () => {
    for (const { id } of server.pool.list()) server.pool.evict(id);
  },
});
