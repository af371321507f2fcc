/**
 * Where the router and the server report 5xx details (never to the client).
 * Either `error(message, error)` (console's shape), or a structured logger
 * (pino, bunyan, winston: one with a `child` method), called `error({err, request_id, ...}, message)`.
 */
export interface Logger {
  error(message: string, error?: unknown): void;
}

/** What a record may say about the request it came from. */
export interface LogFields {
  requestId?: string | undefined;
  agentId?: string | undefined;
  turnId?: string | undefined;
}

/** The library's own logger: a message, the failure, and the request's fields. */
export interface Log {
  error(message: string, error?: unknown, fields?: LogFields): void;
}

/**
 * The logger to use: the caller's, made unable to throw (a logger that
 * throws while a failure is being answered would leave the request
 * unanswered and reject a promise nobody catches), or the console.
 * A logger with a `child` method gets pino's shape; any other, the message first.
 */
export function loggerOf(given: Logger | undefined): Log {
  if (given === undefined) return { error: (message, error, fields) => (fields === undefined ? console.error(message, error) : console.error(message, error, fields)) };
  const structured = typeof (given as { child?: unknown }).child === 'function';
  return {
    error(message, error, fields) {
      try {
        if (structured) (given.error as unknown as (record: object, message: string) => void)(recordOf(error, fields), message);
        else if (fields === undefined) given.error(message, error);
        else (given.error as (message: string, error: unknown, fields: LogFields) => void)(message, error, fields);
      } catch (failure) {
        console.error(message, error, '(the logger option threw:', failure, ')');
      }
    },
  };
}

/** pino's record: `err` (its serializer's key) and snake_case fields, as the HTTP API spells them. */
function recordOf(error: unknown, fields: LogFields | undefined): Record<string, unknown> {
  const record: Record<string, unknown> = {};
  if (error !== undefined) record['err'] = error;
  if (fields?.requestId !== undefined) record['request_id'] = fields.requestId;
  if (fields?.agentId !== undefined && fields.agentId !== '') record['agent_id'] = fields.agentId;
  if (fields?.turnId !== undefined) record['turn_id'] = fields.turnId;
  return record;
}
