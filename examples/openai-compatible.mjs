// Any OpenAI-compatible Chat Completions server. A local Ollama, no key:
//   OPENAI_BASE_URL=http://localhost:11434/v1 OPENAI_MODEL=llama3.2 node openai-compatible.mjs
// OpenAI itself: OPENAI_BASE_URL=https://api.openai.com/v1 OPENAI_MODEL=gpt-4o-mini OPENAI_API_KEY=sk-...
import { Agent, AgentRegistry, AgentServer, openAIModel } from 'agent-router';

const model = openAIModel({
  model: process.env.OPENAI_MODEL ?? 'llama3.2',
  baseURL: process.env.OPENAI_BASE_URL ?? 'http://localhost:11434/v1',   // includes the /v1
  apiKey: process.env.OPENAI_API_KEY,                                     // none for a local server
});
class Assistant extends Agent {
  constructor(id) { super(id, { model, system: 'You are helpful. Answer in one sentence.' }); }
}
const registry = new AgentRegistry();
registry.register('assistant-[0-9]+', Assistant);

const server = new AgentServer(registry);
await server.serve(8080);                          // POST /agent/assistant-1/chat
process.on('SIGTERM', () => server.close().then(() => process.exit(0)));
