// The front: forwards every `remote-*` id to the back (remote-back.mjs), serves the rest itself.
import http from 'node:http';
import { Agent, AgentRegistry, AgentRouter, HTTPTransport, echoModel } from 'agent-router';

class Local extends Agent {
  constructor(id) { super(id, { model: echoModel() }); }
}
const registry = new AgentRegistry();
registry.register('remote-.*', new HTTPTransport('http://127.0.0.1:8001/agent', {
  headers: { Authorization: `Bearer ${process.env.REMOTE_TOKEN ?? 'dev'}` },   // only these headers go out
  timeout: 30,                                                                 // seconds of silence before 504
}));
registry.register('.*', Local);                                                // catch-all, registered last
http.createServer(new AgentRouter(registry).toRequestListener()).listen(8000);
