// A shop whose refunds over 100 wait for a person's decision. The model is scripted, so no key is needed:
// asked anything, it calls refund with the amount in the message, then reports the tool's result.
import { Agent, AgentServer, scriptedModel } from 'agent-router';

const model = scriptedModel(({ messages }) => {
  const last = messages.at(-1);
  if (last.role === 'tool') return `Refund: ${last.content}`;
  return { toolCalls: [{ name: 'refund', arguments: { amount: Number(last.content.match(/\d+/)?.[0] ?? 0) } }] };
});

class Shop extends Agent {
  static tools = {
    refund: {
      description: 'Refunds the customer',
      parameters: { type: 'object', properties: { amount: { type: 'number' } }, required: ['amount'] },
      approval: ({ amount }) => amount > 100,                // larger refunds wait for a person
    },
  };
  constructor(id) { super(id, { model }); }
  async refund({ amount }) { return { refunded: amount }; }
}

const server = new AgentServer(new Shop('shop'));
await server.serve(8080);
process.on('SIGTERM', () => server.close().then(() => process.exit(0)));
