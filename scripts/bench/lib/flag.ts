/** The value of `--name=value` on this process's command line, or `fallback` (the diagnostics' flags; the bench itself parses with settings.ts). */
export function flag(name: string, fallback: string): string {
  const prefix = `--${name}=`;
  return process.argv.find((arg) => arg.startsWith(prefix))?.slice(prefix.length) ?? fallback;
}
