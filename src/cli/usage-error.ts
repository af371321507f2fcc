/** A mistake in how the CLI was called: printed as one line, exit code 2. */
export class UsageError extends Error {
  override name = 'UsageError';
}
