// Compiled by `tsc` (npm test's type-check), never run: each adapter must be
// assignable to its framework's own middleware type, as a user annotates it.
import type { Middleware } from 'koa';
import { toKoa } from '../../src/adapters/koa.ts';
import { AgentRouter } from '../../src/router/router.ts';
import { AgentRegistry } from '../../src/registry/registry.ts';

export const koaMiddleware: Middleware = toKoa(new AgentRouter(new AgentRegistry()));
