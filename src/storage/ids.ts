import { createHash } from 'node:crypto';
import { AgentRouterError } from '../errors.ts';

// String.prototype.isWellFormed is ES2024; the compiler targets ES2023 here.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Refuses ids a text-keyed backend cannot store faithfully. Postgres `text`
 * and Redis keys travel as UTF-8, where a lone surrogate becomes U+FFFD, so
 * `"\ud800"` and `"\udc00"` would share one record; Postgres `text` also
 * cannot hold U+0000. No id that arrives over HTTP has either (the router
 * decodes percent-escapes as UTF-8 and refuses control characters), so only
 * a caller building ids in code meets this error.
 */
export function assertStorableId(agentId: string, backend: string, options: { allowNul?: boolean } = {}): void {
  if (typeof agentId !== 'string') {
    throw new AgentRouterError(400, 'invalid_agent_id', `${backend}: agent id must be a string, got ${typeof agentId}`);
  }
  if (LONE_SURROGATE.test(agentId)) {
    throw new AgentRouterError(400, 'invalid_agent_id', `${backend}: agent id must be well-formed Unicode (it holds a lone surrogate)`);
  }
  if (options.allowNul !== true && agentId.includes('\u0000')) {
    throw new AgentRouterError(400, 'invalid_agent_id', `${backend}: agent id must not contain the NUL character`);
  }
}

/** SHA-256 of the id's UTF-8 bytes: a fixed-size key however long the id is. */
export function idDigest(agentId: string): Buffer {
  return createHash('sha256').update(agentId, 'utf8').digest();
}

/** A lease length in seconds, checked, as milliseconds. */
export function leaseMilliseconds(seconds: number | undefined, fallback: number, backend: string): number {
  const value = seconds ?? fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new TypeError(`${backend}: leaseSeconds must be a positive number of seconds, got ${String(seconds)}`);
  }
  return Math.max(1, Math.round(value * 1000));
}
