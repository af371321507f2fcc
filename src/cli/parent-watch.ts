/** How often a server started through npm checks that npm is still there. */
const CHECK_MS = 500;

/**
 * The parent as this module loads, early in the process's life (the CLI's
 * entry imports it): npm killed while the server was still starting counts
 * as gone too, once the server listens.
 */
const parentAtLoad = process.ppid;

/**
 * Calls `onGone` once when the process that started this one is gone, if
 * this one was started through npm (`npm start`, `npx agent-router`).
 *
 * npm runs a script through `sh -c`, and that shell stays between npm and
 * node without passing signals on: `kill <npm>` (what a CI step or a
 * process manager does) makes npm forward SIGTERM to the shell, the shell
 * dies, npm exits, and the server would run on with no parent, holding its
 * port. Here the server notices that its parent changed (it was adopted)
 * and shuts down as on SIGTERM.
 *
 * Only under npm: a server started with `nohup agent-router serve &` must
 * outlive the shell that started it. Not on Windows, where a process is
 * never adopted (its parent id stays the dead parent's), so this check
 * could not see the parent go.
 */
export function whenParentGone(env: NodeJS.ProcessEnv, onGone: () => void): void {
  if (env['npm_command'] === undefined || process.platform === 'win32') return;
  const timer = setInterval(() => {
    if (process.ppid === parentAtLoad) return;
    clearInterval(timer);
    onGone();
  }, CHECK_MS);
  // The check never keeps the process alive by itself.
  timer.unref();
}
