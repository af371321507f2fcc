#!/usr/bin/env node
/**
 * The `agent-router` bin: `agent-router serve [module] --port 8080`.
 * See src/cli/help.ts for the flags; the work is in run.ts.
 */
import { main } from './run.ts';

main(process.argv.slice(2)).then((code) => {
  // A failure exits now: a module that opened a connection or a timer would keep the process alive.
  if (code !== undefined && code !== 0) process.exit(code);
  if (code !== undefined) process.exitCode = code;
});
