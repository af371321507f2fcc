/**
 * A router whose every id is remote: one HTTPTransport to the backend whose
 * base URL is the first argument (scenario 7, one proxy hop).
 */
import http from 'node:http';
import { AgentRouter } from '../../../src/router/router.ts';
import { AgentRegistry } from '../../../src/registry/registry.ts';
import { HTTPTransport } from '../../../src/transports/http.ts';
import { CAPACITY } from './agents.ts';
import { announce, listen } from './ipc.ts';

const backend = process.argv[2];
if (backend === undefined) throw new Error('proxy contender: pass the backend base URL, e.g. http://127.0.0.1:8080');
const registry = new AgentRegistry();
registry.register('.*', new HTTPTransport(backend));
const router = new AgentRouter(registry, { maxStreams: CAPACITY, maxAgents: CAPACITY });
announce('proxy', await listen(http.createServer(router.toRequestListener())), '');
