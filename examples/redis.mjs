import { createClient } from 'redis';
import { Agent, AgentRegistry, AgentServer, echoModel, redisStorage } from 'agent-router';

const client = createClient({ url: process.env.REDIS_URL });
// A lost connection is an 'error' on the client (it reconnects): unheard, node-redis ends the process.
client.on('error', (error) => console.error('redis:', error.message));
await client.connect();
const storage = redisStorage(client, { prefix: 'myapp:agents:' });
// ioredis: import { Redis } from 'ioredis'; const storage = redisStorage(new Redis(process.env.REDIS_URL));
class Bot extends Agent { constructor(id) { super(id, { model: echoModel(), storage }); } }

const registry = new AgentRegistry();
registry.register('.*', Bot);
const server = new AgentServer(registry);
await server.serve(8080);                          // POST /agent/{agent_id}/chat
process.on('SIGTERM', async () => { await server.close(); await storage.close(); await client.close(); });
