import type { IncomingMessage, ServerResponse } from 'node:http';
import { holdContinue } from './body.ts';

/**
 * A `checkContinue` listener for an `http.Server` of your own that serves
 * the router's listener (or AgentServer's). Node otherwise sends
 * `100 Continue` to every `Expect: 100-continue` request before the router
 * sees it, so the client sends its body even to be refused. With this, the
 * 100 goes out only once the router reads the body: a request refused on its
 * headers (no route, no matching agent id, too large, not JSON, not
 * authorized) is answered at once and its connection closed. Only for a
 * listener that leaves the body to the router: a body parser in front
 * (express.json()) would wait for a body the client holds back.
 *
 * @example
 * const listener = router.toRequestListener();
 * http.createServer(listener).on('checkContinue', continueListener(listener)).listen(8000);
 */
export function continueListener(listener: (req: IncomingMessage, res: ServerResponse) => void): (req: IncomingMessage, res: ServerResponse) => void {
  if (typeof listener !== 'function') {
    throw new TypeError('continueListener: pass the listener the server serves, e.g. continueListener(router.toRequestListener())');
  }
  const serve = listener as (req: IncomingMessage, res: ServerResponse) => void;
  return (req, res) => {
    holdContinue(req, res);
    serve(req, res);
  };
}
