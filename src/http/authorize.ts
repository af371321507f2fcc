import type { IncomingMessage } from 'node:http';
import { AgentRouterError, describeValue } from '../errors.ts';

/**
 * What the hook is asked about: which agent, and which action. The generic
 * envelope is asked as the action it carries; AgentServer's `GET /agents`
 * is asked as `{agentId: '*', action: 'list'}`.
 */
export interface AuthorizeContext {
  agentId: string;
  action: 'chat' | 'invoke' | 'state' | 'list' | 'read' | 'cancel' | 'approve';
}

/**
 * Decides whether a request may touch an agent. Return (or resolve) `true` to
 * allow, `false` to refuse with 403. Throw an error with `status` 401 or 403
 * to refuse with that status and the error's message. Anything else
 * (`undefined` from `req.user?.isAdmin`, `null`, `0`, `''`, an object) is a
 * mistake in the hook: refused with 500 and logged, never taken as a yes.
 *
 * @example
 * authorize: (req, { agentId }) => agentId === `user-${userIdFromToken(req.headers.authorization)}`
 */
export type Authorize = (request: IncomingMessage, context: AuthorizeContext) => boolean | Promise<boolean>;

export async function authorizeRequest(
  authorize: Authorize | undefined,
  req: IncomingMessage,
  agentId: string,
  action: AuthorizeContext['action'],
): Promise<void> {
  if (authorize === undefined) return;
  let verdict: unknown;
  try {
    verdict = await authorize(req, { agentId, action });
  } catch (error) {
    const status = (error as { status?: unknown } | null)?.status;
    if (status === 401 || status === 403) {
      const message = error instanceof Error && error.message !== '' ? error.message : status === 401 ? 'Unauthorized' : 'Forbidden';
      throw new AgentRouterError(status, status === 401 ? 'unauthorized' : 'forbidden', message, {
        cause: error,
        ...(status === 401 ? { headers: { 'WWW-Authenticate': 'Bearer' } } : {}),
      });
    }
    throw error;
  }
  if (verdict === true) return;
  if (verdict === false) throw new AgentRouterError(403, 'forbidden', 'Forbidden');
  // Fail closed: a hook that forgot to return, or returned something falsy but not false, must not let everyone in.
  throw new TypeError(`authorize must return (or resolve) true to allow or false to refuse, got ${describeValue(verdict)}; e.g. return req.user?.isAdmin === true`);
}
