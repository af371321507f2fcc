/** What a request asks for, once its path is matched. */
/** `approvals` lists the pending calls (GET), `approve` decides them (POST), on the same path. */
export type RouteAction = 'chat' | 'invoke' | 'state' | 'request' | 'events' | 'cancel' | 'approvals' | 'approve';

export interface RouteMatch {
  action: RouteAction;
  /** The raw (still percent-encoded) `{agent_id}` segment; undefined on a single-agent router. */
  segment: string | undefined;
  /** The one method this route answers (`GET, POST` for the approvals path). */
  method: 'GET' | 'POST' | 'GET, POST';
  /** The raw `{turn_id}` segment of a rejoin. */
  turn?: string | undefined;
}

/**
 * The route as asked with `method`, or undefined (405): the approvals path
 * lists with GET (or HEAD) and decides with POST; any other route has one method.
 */
export function routeFor(route: RouteMatch, method: string | undefined): RouteMatch | undefined {
  if (route.method === 'GET, POST') {
    if (method === 'POST') return { ...route, action: 'approve', method: 'POST' };
    return method === 'GET' || method === 'HEAD' ? { ...route, method: 'GET' } : undefined;
  }
  return method === route.method || (method === 'HEAD' && route.method === 'GET') ? route : undefined;
}

/** `/turns/{turn_id}/events` (the rest of a path after the agent), or undefined. */
function matchTurn(rest: string, segment: string | undefined): RouteMatch | undefined {
  if (!rest.startsWith('/turns/')) return undefined;
  const end = rest.endsWith('/events/') ? rest.length - 8 : rest.endsWith('/events') ? rest.length - 7 : -1;
  const turn = end > 7 ? rest.slice(7, end) : '';
  if (turn === '' || turn.includes('/')) return undefined;
  return { action: 'events', segment, method: 'GET', turn };
}

const SINGLE: Record<string, RouteMatch> = Object.assign(Object.create(null) as Record<string, RouteMatch>, {
  '/chat': { action: 'chat', segment: undefined, method: 'POST' },
  '/chat/': { action: 'chat', segment: undefined, method: 'POST' },
  '/invoke': { action: 'invoke', segment: undefined, method: 'POST' },
  '/invoke/': { action: 'invoke', segment: undefined, method: 'POST' },
  '/state': { action: 'state', segment: undefined, method: 'GET' },
  '/state/': { action: 'state', segment: undefined, method: 'GET' },
  '/cancel': { action: 'cancel', segment: undefined, method: 'POST' },
  '/cancel/': { action: 'cancel', segment: undefined, method: 'POST' },
  '/approvals': { action: 'approvals', segment: undefined, method: 'GET, POST' },
  '/approvals/': { action: 'approvals', segment: undefined, method: 'GET, POST' },
  '/': { action: 'request', segment: undefined, method: 'POST' },
  '': { action: 'request', segment: undefined, method: 'POST' },
});

/** `/chat`, `/invoke`, `/state`, `/` of a single-agent router (a trailing slash is tolerated, as on a registry router). */
export function matchSingle(path: string): RouteMatch | undefined {
  return SINGLE[path] ?? matchTurn(path, undefined);
}

/**
 * `/{agent_id}/chat`, `/{agent_id}/invoke`, `/{agent_id}/state` and
 * `/{agent_id}` of a registry router (a trailing slash is tolerated).
 */
export function matchRegistry(path: string): RouteMatch | undefined {
  if (path.charCodeAt(0) !== 47 /* / */) return undefined;
  const slash = path.indexOf('/', 1);
  const segment = slash === -1 ? path.slice(1) : path.slice(1, slash);
  const rest = slash === -1 ? '' : path.slice(slash);
  if (segment === '' && rest === '') return undefined;
  switch (rest) {
    case '':
    case '/':
      return { action: 'request', segment, method: 'POST' };
    case '/chat':
    case '/chat/':
      return { action: 'chat', segment, method: 'POST' };
    case '/invoke':
    case '/invoke/':
      return { action: 'invoke', segment, method: 'POST' };
    case '/state':
    case '/state/':
      return { action: 'state', segment, method: 'GET' };
    case '/cancel':
    case '/cancel/':
      return { action: 'cancel', segment, method: 'POST' };
    case '/approvals':
    case '/approvals/':
      return { action: 'approvals', segment, method: 'GET, POST' };
    default:
      return matchTurn(rest, segment);
  }
}

/** What no request path carries as it is: a character outside printable ASCII, `?` or `#`, or a `%` that starts no escape. */
const NOT_IN_A_PATH = /[^\x21-\x7e]|[?#]|%(?![0-9A-Fa-f]{2})/;

/** Normalizes a mount prefix: leading slash, no trailing slash, '' for none. */
export function normalizePrefix(prefix: string | undefined): string {
  if (prefix === undefined || prefix === '' || prefix === '/') return '';
  if (typeof prefix !== 'string') throw new TypeError('AgentRouter: prefix must be a string such as "/agents"');
  // The prefix is matched against the raw request path, where such characters arrive percent-encoded (and a
  // dot segment is resolved away by clients): it would answer 404 to everything.
  if (NOT_IN_A_PATH.test(prefix) || prefix.split('/').some((segment) => segment === '.' || segment === '..')) {
    throw new TypeError(`AgentRouter: prefix ${JSON.stringify(prefix)} is matched against request paths as they are sent: write it as they carry it, in printable ASCII with no space, ?, # or . / .. segment, other characters percent-encoded ("/caf%C3%A9")`);
  }
  const withSlash = prefix.startsWith('/') ? prefix : `/${prefix}`;
  return withSlash.endsWith('/') ? withSlash.slice(0, -1) : withSlash;
}

/** The path below `prefix`, or undefined when the path is not under it. */
export function stripPrefix(path: string, prefix: string): string | undefined {
  if (prefix === '') return path;
  if (!path.startsWith(prefix)) return undefined;
  const rest = path.slice(prefix.length);
  return rest === '' || rest.charCodeAt(0) === 47 ? rest : undefined;
}
