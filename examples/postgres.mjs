import pg from 'pg';
import { Agent, AgentRegistry, AgentServer, echoModel, postgresStorage } from 'agent-router';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
// An idle connection lost (Postgres restarting) is an 'error' on the pool: unheard, pg ends the process.
pool.on('error', (error) => console.error('postgres:', error.message));
const storage = postgresStorage(pool);            // creates its two tables on first use
class Bot extends Agent { constructor(id) { super(id, { model: echoModel(), storage }); } }

const registry = new AgentRegistry();
registry.register('bot-[0-9]+', Bot);
const server = new AgentServer(registry);
await server.serve(8080);                          // POST /agent/bot-1/chat
process.on('SIGTERM', async () => { await server.close(); await storage.close(); await pool.end(); });
