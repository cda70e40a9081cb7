/**
 * Single-quotes a value for a POSIX shell. Used where a shell is unavoidable (the tunnel's remote
 * script, git's `core.sshCommand`), and only for values sandboxd generated: defence in depth.
 */
export function shQuote(value: string): string {
  return `'${value.replaceAll("'", `'\\''`)}'`;
}
