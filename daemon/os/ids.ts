import { createHash, randomBytes } from 'node:crypto';

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
