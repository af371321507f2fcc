#!/usr/bin/env node
/**
 * The `agent-router` bin: `agent-router serve [module] --port 8080`.
 * See src/cli/help.ts for the flags; the work is in run.ts.
 */
import { main } from './run.ts';

// A reader that went away (`agent-router serve | head -1`) must not turn a later log line into a crash
// that skips the graceful shutdown; the lines are only for people and scripts reading them.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code !== 'EPIPE') throw error;
});

main(process.argv.slice(2)).then((code) => {
  // A failure exits now: a module that opened a connection or a timer would keep the process alive.
  if (code !== undefined && code !== 0) process.exit(code);
  if (code !== undefined) process.exitCode = code;
});
