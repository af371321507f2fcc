import type { IncomingMessage, ServerResponse } from 'node:http';
import { httpErrors } from '../errors.ts';
import { tagRequest } from '../http/request-id.ts';
import { METRICS_CONTENT_TYPE } from '../lib/metrics.ts';
import type { AgentRouter } from '../router/router.ts';

/**
 * The server's own paths get a request id too; `GET /metrics` (with the `metrics` option) is answered here:
 * true once answered.
 */
export function serveOwnPath(req: IncomingMessage, res: ServerResponse, path: string, router: AgentRouter): boolean {
  tagRequest(req, res);
  if (path !== '/metrics' || router.options.metrics !== true) return false;
  if (req.method !== 'GET' && req.method !== 'HEAD') throw httpErrors.methodNotAllowed('GET, HEAD');
  const text = router.metrics();
  res.writeHead(200, { 'content-type': METRICS_CONTENT_TYPE, 'content-length': Buffer.byteLength(text), 'cache-control': 'no-store' });
  res.end(req.method === 'HEAD' ? undefined : text);
  return true;
}
