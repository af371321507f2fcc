import { httpErrors } from '../errors.ts';

const PLACEHOLDER = '{agent_id}';
const PROBE = 'agent-id-probe-5e1f';

/** Builds the URL of one route on a remote agent router; `query` holds parameters to add (turn policies). */
export type RemoteURLBuilder = (agentId: string, route: string, stream?: boolean | 'events', query?: Readonly<Record<string, string>>) => URL;

/**
 * Checks a remote base URL once and returns the builder for per-request URLs.
 * The id always becomes exactly one path segment: it is encoded with
 * `encodeURIComponent` (so `/`, `?`, `#`, `%` and spaces cannot change the
 * remote path), and `.`/`..`, which every URL parser resolves as dot segments
 * even when percent-encoded, are refused with 400 before any request.
 */
export function remoteURLBuilder(url: string | URL): RemoteURLBuilder {
  const template = String(url);
  const templated = template.includes(PLACEHOLDER);
  const base = parseBase(templated ? template.replaceAll(PLACEHOLDER, PROBE) : template, template);
  if (templated && (base.host.includes(PROBE) || base.protocol.includes(PROBE))) {
    throw new TypeError(`HTTPTransport: {agent_id} may only appear in the path or query of the url, got ${JSON.stringify(template)}`);
  }
  const basePath = base.pathname.replace(/\/+$/, '');
  return (agentId, route, stream = false, query = {}) => {
    const segment = encodeSegment(agentId);
    let target: URL;
    if (templated) {
      target = new URL(template.replaceAll(PLACEHOLDER, segment));
      target.pathname = target.pathname.replace(/\/+$/, '') + route;
    } else {
      target = new URL(base);
      target.pathname = `${basePath}/${segment}${route}`;
    }
    target.hash = '';
    if (stream) setParam(target, 'stream', stream === 'events' ? 'events' : 'true');
    for (const name in query) setParam(target, name, query[name] as string);
    return target;
  };
}

/**
 * Appended as it is (`value` is a plain token): searchParams.set re-encodes the whole query (`~` as %7E,
 * `%20` as `+`, `flag` as `flag=`), so a key or signature in the url would reach the remote changed.
 */
function setParam(target: URL, name: string, value: string): void {
  if (target.searchParams.has(name)) target.searchParams.set(name, value);
  else target.search = target.search === '' ? `${name}=${value}` : `${target.search}&${name}=${value}`;
}

/** How the remote is named in error messages: origin and path, never credentials or the query. */
export function describeRemote(url: URL): string {
  return `${url.origin}${url.pathname}`;
}

function parseBase(candidate: string, shown: string): URL {
  let base: URL;
  try {
    base = new URL(candidate);
  } catch {
    throw new TypeError(`HTTPTransport: url must be an absolute http(s) URL such as "http://10.0.0.5:8080/agent", got ${JSON.stringify(shown)}`);
  }
  if (base.protocol !== 'http:' && base.protocol !== 'https:') {
    throw new TypeError(`HTTPTransport: url must use http: or https:, got ${JSON.stringify(base.protocol)}`);
  }
  if (base.username !== '' || base.password !== '') {
    // fetch refuses such URLs anyway; say where credentials belong instead.
    throw new TypeError('HTTPTransport: url must not contain credentials; pass them as headers, e.g. { headers: { Authorization: "Bearer <token>" } }');
  }
  return base;
}

function encodeSegment(agentId: string): string {
  if (typeof agentId !== 'string' || agentId === '') throw httpErrors.badRequest('bad_agent_id', 'Agent id is empty');
  if (agentId === '.' || agentId === '..') throw httpErrors.badRequest('bad_agent_id', 'Agent id may not be "." or ".."');
  try {
    return encodeURIComponent(agentId);
  } catch {
    // A lone surrogate has no UTF-8 form, so it cannot travel in a URL.
    throw httpErrors.badRequest('bad_agent_id', 'Agent id is not valid Unicode (lone surrogate)');
  }
}
