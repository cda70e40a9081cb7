import { createHash, randomBytes } from 'node:crypto';

/** Longest echo of a caller's value in a message or log line: a 4 KiB path must not cost 4 KiB a line. */
export const ECHO_MAX_CHARS = 200;

/** Shortens a value for echoing, marking the cut with an ellipsis. */
export function clip(value: string, max = ECHO_MAX_CHARS): string {
  return value.length <= max ? value : `${value.slice(0, max)}…`;
}

/**
 * Single-quotes a value for a POSIX shell. Used where a shell is unavoidable (the tunnel's remote
 * script, git's `core.sshCommand`), and only for values sandboxd generated: defence in depth.
 */
export function shQuote(value: string): string {
  return `'${value.replaceAll("'", `'\\''`)}'`;
}

const ALPHABET = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';

export function randomId(prefix: string, length = 16): string {
  const bytes = randomBytes(length);
  let id = '';
  for (const byte of bytes) id += ALPHABET.charAt(byte % ALPHABET.length);
  return `${prefix}_${id}`;
}

/** Stable short name for a key, so the same agent or tunnel keeps its id and directory. */
export function stableHash(value: string, length = 12): string {
  return createHash('sha256').update(value).digest('hex').slice(0, length);
}
