// Node's builtins as they are, not imported: the bundle's ES module interop copies every export of
// an imported builtin on every start of the `sandboxd` entry, which holds this module.
const path = process.getBuiltinModule('node:path');

type EnableCompileCache = (directory?: string) => unknown;

/**
 * Node ≥ 22.1 (and recent Bun) can keep the compiled code between runs, so a command stops paying to
 * parse its modules on every call. The cache lives in the user's own cache directory: the
 * default, a shared directory under /tmp, is one another user could fill first. Node 20 has no
 * such call, and an explicit NODE_COMPILE_CACHE is the user's choice to keep.
 */
export function enableCompileCache(env: NodeJS.ProcessEnv = process.env): void {
  // Loading node:module costs Node 20 a few internal modules for a call it does not have.
  if (Number(process.versions.node.split('.')[0]) < 22) return;
  const enable = (process.getBuiltinModule('node:module') as { enableCompileCache?: EnableCompileCache }).enableCompileCache;
  if (enable === undefined || env.NODE_COMPILE_CACHE !== undefined || env.NODE_DISABLE_COMPILE_CACHE !== undefined) return;
  enable(sandboxdCacheDir('node-compile-cache', env));
}

/** `name` in sandboxd's directory of the user's own cache: XDG_CACHE_HOME or ~/.cache (~/Library/Caches on macOS). */
export function sandboxdCacheDir(name: string, env: NodeJS.ProcessEnv = process.env, home = process.getBuiltinModule('node:os').homedir(), platform: NodeJS.Platform = process.platform): string {
  const cacheHome = platform === 'darwin' ? path.join(home, 'Library', 'Caches') : env.XDG_CACHE_HOME || path.join(home, '.cache');
  return path.join(cacheHome, 'sandboxd', name);
}
