/** Where the router and the server report 5xx details (never to the client). */
export interface Logger {
  error(message: string, error?: unknown): void;
}

/**
 * The logger to use: the caller's, made unable to throw (a logger that
 * throws while a failure is being answered would leave the request
 * unanswered and reject a promise nobody catches), or the console.
 */
export function loggerOf(given: Logger | undefined): Logger {
  if (given === undefined) return { error: (message, error) => console.error(message, error) };
  return {
    error(message, error) {
      try {
        given.error(message, error);
      } catch (failure) {
        console.error(message, error, '(the logger option threw:', failure, ')');
      }
    },
  };
}
