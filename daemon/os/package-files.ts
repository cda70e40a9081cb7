import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

interface Package {
  root: string;
  version: string;
}

/**
 * The sandboxd package around this module, found by walking up to its package.json: the same
 * answer from tsc's `dist/`, from the bundled `dist/bin/chunks/`, and from the sources under
 * vitest. Null inside another program's bundle, where no sandboxd package.json sits above the file.
 */
function findPackage(): Package | null {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (let depth = 0; depth < 5; depth += 1) {
    try {
      const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'sandboxd' && typeof pkg.version === 'string') return { root: dir, version: pkg.version };
    } catch {
      // not at the package root yet
    }
    dir = path.dirname(dir);
  }
  return null;
}

export const PACKAGE = findPackage();

/** A file of the package, or a path that does not exist when there is no package around this code. */
export function packageFile(...segments: string[]): string {
  return path.join(PACKAGE?.root ?? '/nonexistent/sandboxd', ...segments);
}

/** The `sandboxd` command itself: the bundled CLI that `npm run build` writes (scripts/bundle.js). */
export const CLI_ENTRY = packageFile('dist', 'bin', 'sandboxd.js');

export const VERSION = PACKAGE?.version ?? '0.0.0-unknown';
