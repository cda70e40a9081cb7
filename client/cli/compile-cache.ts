import module from 'node:module';
import os from 'node:os';
import path from 'node:path';

type EnableCompileCache = (directory?: string) => unknown;

/**
 * Node ≥ 22.1 can keep V8's compiled code between runs, which halves what parsing the command's
 * modules costs on every call (issue 13). The cache lives in the user's own cache directory: the
 * default, a shared directory under /tmp, is one another user could fill first. Older Node and
 * Bun have no such call, and an explicit NODE_COMPILE_CACHE is the user's choice to keep.
 */
export function enableCompileCache(env: NodeJS.ProcessEnv = process.env): void {
  const enable = (module as { enableCompileCache?: EnableCompileCache }).enableCompileCache;
  if (enable === undefined || env.NODE_COMPILE_CACHE !== undefined || env.NODE_DISABLE_COMPILE_CACHE !== undefined) return;
  const home = os.homedir();
  const cacheHome = process.platform === 'darwin' ? path.join(home, 'Library', 'Caches') : (env.XDG_CACHE_HOME || path.join(home, '.cache'));
  enable(path.join(cacheHome, 'sandboxd', 'node-compile-cache'));
}
