/** Our router inside Express 5: `app.use(toExpress(router))` (the router reads the body itself). */
import http from 'node:http';
import { toExpress } from '../../../src/adapters/express.ts';
import { AgentRouter } from '../../../src/router/router.ts';
import { benchRegistry, CAPACITY } from './agents.ts';
import { loadExpress } from './frameworks.ts';
import { announce, listen } from './ipc.ts';

const router = new AgentRouter(benchRegistry(), { maxStreams: CAPACITY, maxAgents: CAPACITY });
const express = await loadExpress();
const app = express();
app.use(toExpress(router));
announce('express-router', await listen(http.createServer(app)), '', { count: () => router.pool?.size ?? 0 });
