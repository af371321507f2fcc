/** Our router on plain node:http: `http.createServer(router.toRequestListener())`. */
import http from 'node:http';
import { AgentRouter } from '../../../src/router/router.ts';
import { benchRegistry, CAPACITY } from './agents.ts';
import { announce, listen } from './ipc.ts';

const router = new AgentRouter(benchRegistry(), { maxStreams: CAPACITY, maxAgents: CAPACITY });
const pool = router.pool;
announce('router', await listen(http.createServer(router.toRequestListener())), '', {
  count: () => pool?.size ?? 0,
  evict: () => {
    for (const { id } of pool?.list() ?? []) pool?.evict(id);
  },
});
