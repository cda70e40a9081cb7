import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** Walks up from this file so it works from `dist/` and from sources under vitest alike. */
function readVersion(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (let depth = 0; depth < 5; depth += 1) {
    try {
      const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'sandboxd' && typeof pkg.version === 'string') return pkg.version;
    } catch {
      // not at the package root yet
    }
    dir = path.dirname(dir);
  }
  return '0.0.0-unknown';
}

export const VERSION = readVersion();
