import { CODE_CACHE_MARK } from '../../daemon/os/clock.js';
import { sandboxdCacheDir } from './compile-cache.js';

// Node's builtins as they are, not imported: the bundle's ES module interop copies every export
// of an imported builtin (node:fs has over a hundred) on the start of every run and daemon.
const { closeSync, fstatSync, lstatSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, renameSync, rmSync, constants, writeFileSync } = process.getBuiltinModule('node:fs');
const { createRequire } = process.getBuiltinModule('node:module');
const path = process.getBuiltinModule('node:path');
const { fileURLToPath } = process.getBuiltinModule('node:url');
const { Script } = process.getBuiltinModule('node:vm');

/**
 * The start of the daemon and of `run`, compiled once: V8 keeps what it compiled of a script (the
 * functions the start ran included, not only its top level) as code cache data, which a later
 * start of the same script on the same Node takes instead of compiling again. Node's own compile
 * cache (Node ≥ 22.1, compile-cache.ts) keeps only what a module compiles before it runs, and
 * Node 20 has none, so these bundles are CommonJS scripts run through `vm.Script` with the data.
 *
 * The data is code the process runs: it is read only from a directory of this user's that no one
 * else can write, only from a regular file of this user's that no one else can write, and only
 * under a name that holds the script's content hash and Node's version (V8 itself checks little
 * more than the source's length). Anything else is ignored, never an error: a start without
 * the data compiles as any start did.
 */

/** How the start went: the data was taken, V8 refused it (another V8 or flags), there was none, or caching is off. */
export type CodeCacheUse = 'used' | 'rejected' | 'absent' | 'off';

export interface CodeCacheOptions {
  /** The directory of the data (created 0700); null: caching is off. */
  dir: string | null;
  /**
   * New data is written this long after the start, once the start's functions are compiled, or
   * as the process exits (a command whose work may be over before any timer would fire).
   */
  writeAfterMs: number | 'exit';
  uid?: number;
}

export interface CodeCacheRun {
  use: CodeCacheUse;
  /** Settles once new data is written (true) or was not (false); at once when none was due. */
  written: Promise<boolean>;
}

const WRAPPER_HEAD = '(function (exports, require, module, __filename, __dirname) { ';
const WRAPPER_TAIL = '\n})';
const DATA_SUFFIX = '.v8cache';
/** The line the build ends a bundle with (scripts/bundle.js): the SHA-256 of the text before it. */
const HASH_LINE = '\n// sandboxd-sha256 ';
/** Past this the data is not what V8 writes for this bundle: not read. */
const MAX_DATA_BYTES = 64 * 1024 * 1024;

/**
 * Where a bundle's data lives, one directory per bundle (writing one removes the others' data in
 * it); null when NODE_DISABLE_COMPILE_CACHE turns Node's compile cache off too.
 */
export function codeCacheDir(bundle: 'daemon' | 'run', env: NodeJS.ProcessEnv = process.env): string | null {
  return env.NODE_DISABLE_COMPILE_CACHE === undefined ? sandboxdCacheDir(`${bundle}-code-cache`, env) : null;
}

/**
 * The bundle's SHA-256: the one the build wrote on its last line, so a start need not load
 * node:crypto (a few milliseconds) to hash a file the build hashed already; hashed here only
 * for a bundle without that line.
 */
function sourceHash(source: string): string {
  const at = source.lastIndexOf(HASH_LINE);
  const stated = at < 0 ? null : /^([0-9a-f]{64})\n$/.exec(source.slice(at + HASH_LINE.length));
  if (stated?.[1] !== undefined) return stated[1];
  return process.getBuiltinModule('node:crypto').createHash('sha256').update(source).digest('hex');
}

/** A directory or file only `uid` can have written: its own, no group or other write bit, no symbolic link. */
function ownAndClosed(stat: { uid: number; mode: number }, uid: number): boolean {
  return stat.uid === uid && (stat.mode & 0o022) === 0;
}

function trustedDir(dir: string, uid: number): boolean {
  try {
    const stat = lstatSync(dir);
    return stat.isDirectory() && ownAndClosed(stat, uid);
  } catch {
    return false;
  }
}

/** The data, when the directory and the file are this user's alone; checked on the open file. */
function readTrusted(file: string, uid: number): Buffer | null {
  let fd: number;
  try {
    fd = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return null;
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile() || !ownAndClosed(stat, uid) || stat.size > MAX_DATA_BYTES) return null;
    const data = Buffer.alloc(stat.size);
    let read = 0;
    while (read < data.length) {
      const bytes = readSync(fd, data, read, data.length - read, read);
      if (bytes === 0) return null;
      read += bytes;
    }
    return data;
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}

/** Written beside, then renamed into place, and the data of other bundles or Node versions removed. */
function writeData(dir: string, name: string, data: Buffer, uid: number): boolean {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    if (!trustedDir(dir, uid)) return false;
    const temporary = path.join(dir, `.${name}.${String(process.pid)}`);
    writeFileSync(temporary, data, { mode: 0o600, flag: 'wx' });
    renameSync(temporary, path.join(dir, name));
    for (const entry of readdirSync(dir)) if (entry !== name && entry.endsWith(DATA_SUFFIX)) rmSync(path.join(dir, entry), { force: true });
    return true;
  } catch {
    return false;
  }
}

/**
 * Runs the CommonJS bundle `file` as Node would load it, with the code cache in `options.dir` when
 * there is one; returns at once (the bundle's own start goes on in its promises).
 */
export function runWithCodeCache(file: string, options: CodeCacheOptions): CodeCacheRun {
  const uid = options.uid ?? process.getuid?.() ?? 0;
  const source = readFileSync(file, 'utf8');
  const wrapped = `${WRAPPER_HEAD}${source}${WRAPPER_TAIL}`;
  const name = `${process.version}-${process.arch}-${sourceHash(source).slice(0, 40)}${DATA_SUFFIX}`;
  const dir = options.dir;
  const cachedData = dir !== null && trustedDir(dir, uid) ? readTrusted(path.join(dir, name), uid) : null;
  const script = new Script(wrapped, { filename: file, ...(cachedData === null ? {} : { cachedData }) });
  const use: CodeCacheUse = dir === null ? 'off' : cachedData === null ? 'absent' : script.cachedDataRejected === true ? 'rejected' : 'used';
  const { writeAfterMs } = options;
  const written =
    dir === null || use === 'used'
      ? Promise.resolve(false)
      : new Promise<boolean>((resolve) => {
          // Never a throw: at exit one would change the command's exit code.
          const write = (): void => {
            let data: Buffer;
            try {
              data = script.createCachedData();
            } catch {
              resolve(false);
              return;
            }
            resolve(writeData(dir, name, data, uid));
          };
          if (writeAfterMs === 'exit') process.once('exit', write);
          else setTimeout(write, writeAfterMs).unref();
        });
  const module = { exports: {} };
  (script.runInThisContext() as (...args: unknown[]) => void).call(module.exports, module.exports, createRequire(file), module, file, path.dirname(file));
  return { use, written };
}

/** The data is written once the daemon has started and answered its first requests. */
const DAEMON_WRITE_AFTER_MS = 2_000;

/** `sandboxd daemon`: its bundle, with the code cache; the daemon logs how the cache served (startup-timings.ts). */
export function runDaemonBundle(bundle: URL): void {
  const { use } = runWithCodeCache(fileURLToPath(bundle), { dir: codeCacheDir('daemon'), writeAfterMs: DAEMON_WRITE_AFTER_MS });
  performance.mark(CODE_CACHE_MARK, { detail: use });
}

/**
 * `sandboxd run`: its bundle, with the code cache. The data is written as the first run exits,
 * with everything that run compiled (its start, the acquire, the spawn, the release); a run that a
 * signal ends writes none, and the next one does.
 */
export function runRunBundle(bundle: URL): void {
  runWithCodeCache(fileURLToPath(bundle), { dir: codeCacheDir('run'), writeAfterMs: 'exit' });
}
