/** Express 5, native routes (`express.json()`, its router, `res.json`). */
import http from 'node:http';
import { loadExpress } from './frameworks.ts';
import { announce, listen } from './ipc.ts';
import { BAD_MESSAGE, chatReply, nativeHooks, stateReply } from './native-handlers.ts';

const express = await loadExpress();
const app = express();
app.use(express.json());
app.post('/:id/chat', (req, res) => {
  const body = chatReply(req.params['id'] as string, req.body);
  if (body === undefined) return void res.status(400).json(BAD_MESSAGE);
  res.json(body);
});
app.get('/:id/state', (req, res) => res.json(stateReply(req.params['id'] as string)));
announce('express', await listen(http.createServer(app)), '', nativeHooks);
