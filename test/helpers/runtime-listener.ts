// Run by Bun and Deno (test/e2e/runtimes.test.ts): the demo registry behind toRequestListener()
// on the runtime's own node:http, printing the URL as the CLI does.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { demoRegistry } from '../../src/cli/demo.ts';
import { Agent, AgentRouter, MemoryStorage, scriptedModel } from '../../src/index.ts';

/** `hold` streams one piece, then waits until the turn is cut (its client gone); anything else answers at once. */
class HoldAgent extends Agent {
  constructor(id: string) {
    super(id, {
      model: scriptedModel((request) => {
        if (request.messages.at(-1)?.content !== 'hold') return 'quick';
        return (async function* () {
          yield 'held';
          await new Promise((resolve) => request.signal.addEventListener('abort', resolve));
        })();
      }),
    });
  }
}

const registry = demoRegistry({ storage: new MemoryStorage() });
registry.register('hold-.*', HoldAgent);
const router = new AgentRouter(registry, { prefix: '/agent' });
const server = http.createServer(router.toRequestListener());
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  console.log(`listening on http://127.0.0.1:${port}`);
});
process.on('SIGTERM', () => {
  server.close(() => process.exit(0));
  // The test is done with every connection: none is waited for (under Node as under Bun and Deno).
  server.closeAllConnections();
});
