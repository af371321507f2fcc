import { httpErrors } from '../errors.ts';
import { mediaType } from '../lib/media-type.ts';

/** The path and the raw query of a request target, without `new URL()` (it is on every request). */
export function splitTarget(target: string): { path: string; query: string } {
  // The absolute form (`GET http://host/agent/x/state`), which a server must accept (RFC 9112, 3.2.2).
  if (target.charCodeAt(0) !== 47 /* / */) target = originForm(target);
  const mark = target.indexOf('?');
  if (mark === -1) return { path: target, query: '' };
  return { path: target.slice(0, mark), query: target.slice(mark + 1) };
}

/** True when `text` holds more than `limit` code points. */
function codePointsOver(text: string, limit: number): boolean {
  let count = 0;
  for (const _ of text) if (++count > limit) return true;
  return false;
}

/** `http://host/a?b` -> `/a?b`; any other target as it is. */
function originForm(target: string): string {
  const authority = /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i.exec(target);
  if (authority === null) return target;
  const rest = target.slice(authority[0].length);
  return rest.charCodeAt(0) === 47 ? rest : `/${rest}`;
}

/** The value of one query parameter (the first occurrence), decoded; undefined if absent. */
export function queryParam(query: string, name: string): string | undefined {
  if (query === '') return undefined;
  for (const pair of query.split('&')) {
    const equals = pair.indexOf('=');
    const key = equals === -1 ? pair : pair.slice(0, equals);
    if (key !== name) continue;
    const value = equals === -1 ? '' : pair.slice(equals + 1);
    try {
      return decodeURIComponent(value.replace(/\+/g, ' '));
    } catch {
      throw httpErrors.badRequest('bad_query', `Query parameter ${name} is not valid percent-encoding`);
    }
  }
  return undefined;
}

/**
 * Decodes one `{agent_id}` path segment, percent-decoded exactly once, and
 * refuses what no id may be (docs/reference/http-api.md, "Routes"): empty, `.` or `..` (URL
 * parsers treat them as dot segments, even percent-encoded), too long,
 * control characters, malformed percent-encoding, or a `/` after decoding.
 */
export function decodeAgentId(segment: string, maxLength: number): string {
  let id: string;
  try {
    id = segment.includes('%') ? decodeURIComponent(segment) : segment;
  } catch {
    throw httpErrors.badRequest('bad_agent_id', 'Agent id is not valid percent-encoding');
  }
  if (id.length === 0) throw httpErrors.badRequest('bad_agent_id', 'Agent id is empty');
  if (id === '.' || id === '..') throw httpErrors.badRequest('bad_agent_id', 'Agent id may not be "." or ".."');
  // Characters are code points: an emoji is one, though two UTF-16 units (id.length counts those).
  if (id.length > maxLength && codePointsOver(id, maxLength)) {
    throw httpErrors.badRequest('bad_agent_id', `Agent id is longer than ${maxLength} characters`);
  }
  // C0 controls, DEL and C1 controls; and "/" that was percent-encoded.
  if (/[\u0000-\u001f\u007f-\u009f/]/.test(id)) {
    throw httpErrors.badRequest('bad_agent_id', 'Agent id may not contain control characters or "/"');
  }
  return id === segment ? ownCopy(id) : id;
}

/**
 * A copy of a string cut out of a longer one. V8 keeps a cut of 13 or more
 * characters as a view of the whole, so an id kept by the registry's cache,
 * the pool or MemoryStorage would keep the whole request target alive, query
 * string and all (a 15 KB query on each of many ids is 15 KB per id).
 * Concatenating makes a new string; slicing it flattens that into one of the
 * id's own length.
 */
function ownCopy(text: string): string {
  return (` ${text}`).slice(1);
}

/**
 * `stream` is boolean-like (docs/reference/http-api.md, "Streaming"); `events` asks for the typed
 * event stream, `ui` for the AI SDK's UI message stream. Absent, or present with no value (`?stream`, `?stream=`),
 * `Accept` decides.
 */
export function parseStreamFlag(value: string | undefined, accept: string | undefined): boolean | 'events' | 'ui' {
  if (value === undefined || value === '') {
    // Only text/event-stream (parameters aside): `*/*` or a list means the client also takes JSON.
    return accept !== undefined && !accept.includes(',') && mediaType(accept) === 'text/event-stream';
  }
  switch (value.toLowerCase()) {
    case 'true': case '1': case 'yes': case 'on':
      return true;
    case 'false': case '0': case 'no': case 'off':
      return false;
    case 'events':
      return 'events';
    case 'ui':
      return 'ui';
    default:
      // Name `events` too: a client that mistyped it (`stream=event`) learns the right spelling here.
      throw httpErrors.badRequest('bad_query', 'Query parameter stream must be true or false (or 1/0, yes/no, on/off), or events for typed events, or ui for the AI SDK UI message stream');
  }
}

//END
