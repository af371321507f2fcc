// An agent whose replies take their time (a word every 300 ms): a turn to rejoin, cancel or wait behind.
import http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, AgentRegistry, AgentRouter } from 'agent-router';

const slowEcho = {
  name: 'slow-echo',
  async *stream({ messages, signal }) {
    for (const word of messages.at(-1).content.split(' ')) {
      await sleep(300, undefined, { signal });             // a cancelled turn stops here
      yield `${word} `;
    }
  },
};

class Bot extends Agent {
  constructor(id) { super(id, { model: slowEcho }); }
}
const registry = new AgentRegistry();
registry.register('bot-[0-9]+', Bot);
http.createServer(new AgentRouter(registry).toRequestListener()).listen(8000);
