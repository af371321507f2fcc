/** The value of `--name=value` on this process's command line, or `fallback` (the diagnostics' flags; the bench itself parses with settings.ts). */
export function flag(name: string, fallback: string): string {
  const prefix = `--${name}=`;
  return process.argv.find((arg) => arg.startsWith(prefix))?.slice(prefix.length) ?? fallback;
}

/**
 * `--help` prints `usage` and exits 0; an option not in `valued` (`--name=value`) or `switches` (`--name`)
 * exits 2 with it. Without this a diagnostic took `--help` or a misspelt flag for a run with its defaults.
 */
export function checkFlags(usage: string, valued: readonly string[], switches: readonly string[] = []): void {
  for (const arg of process.argv.slice(2)) {
    if (arg === '--help' || arg === '-h') {
      process.stdout.write(`${usage}\n`);
      process.exit(0);
    }
    if (switches.includes(arg.slice(2)) && arg.startsWith('--')) continue;
    if (valued.some((name) => arg.startsWith(`--${name}=`))) continue;
    process.stderr.write(`unknown option ${arg}\n${usage}\n`);
    process.exit(2);
  }
}

/** `--name=N` as a number above 0 (a whole one unless `fraction`), or exits 2 with `usage`. */
export function countFlag(name: string, fallback: number, usage: string, fraction = false): number {
  const raw = flag(name, String(fallback));
  const value = Number(raw);
  if (!(fraction ? Number.isFinite(value) : Number.isSafeInteger(value)) || value <= 0) {
    process.stderr.write(`--${name} must be a ${fraction ? 'number' : 'whole number'} above 0, got ${JSON.stringify(raw)}\n${usage}\n`);
    process.exit(2);
  }
  return value;
}
