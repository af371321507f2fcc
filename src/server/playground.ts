import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { httpErrors } from '../errors.ts';
import { sendError } from '../http/respond.ts';
import { PLAYGROUND_SCRIPT, PLAYGROUND_STYLE, playgroundHtml } from './playground-page.ts';

const hash = (text: string): string => `'sha256-${createHash('sha256').update(text, 'utf8').digest('base64')}'`;

/** Nothing but the page's own script and style, and fetches to this origin; no framing, no forms elsewhere. */
const CSP = [
  "default-src 'none'",
  `script-src ${hash(PLAYGROUND_SCRIPT)}`,
  `style-src ${hash(PLAYGROUND_STYLE)}`,
  "connect-src 'self'",
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

let page: Buffer | undefined;

/** `GET /playground` (AgentServer's `playground` option): the page, under a strict Content-Security-Policy. */
export function servePlayground(req: IncomingMessage, res: ServerResponse): void {
  if (req.method !== 'GET' && req.method !== 'HEAD') return sendError(res, httpErrors.methodNotAllowed('GET, HEAD'));
  page ??= Buffer.from(playgroundHtml(), 'utf8');
  res.writeHead(200, {
    'Content-Type': 'text/html; charset=utf-8',
    'Content-Length': String(page.length),
    'Content-Security-Policy': CSP,
    'Cache-Control': 'no-store',
    'X-Content-Type-Options': 'nosniff',
    'Referrer-Policy': 'no-referrer',
    'X-Frame-Options': 'DENY',
  });
  res.end(req.method === 'HEAD' ? undefined : page);
}
