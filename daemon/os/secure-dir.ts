import { promises as fs } from 'node:fs';
import { SandboxdError } from '../../shared/errors.js';

function octal(mode: number): string {
  return `0${(mode & 0o777).toString(8)}`;
}

/**
 * Creates `dir` (and parents) if missing, then refuses it unless it is a real directory owned by
 * `uid` with no permission bits beyond `mode`. DESIGN §3: the directory is the access boundary.
 */
export async function ensureSecureDir(dir: string, mode = 0o700, uid = process.getuid?.() ?? 0): Promise<void> {
  try {
    await fs.mkdir(dir, { recursive: true, mode });
  } catch (cause) {
    throw new SandboxdError('INSECURE_DIRECTORY', `cannot create ${dir}: ${(cause as Error).message}`, {
      remedy: `Create ${dir} yourself (mkdir -p; chmod ${octal(mode)}) or point the SANDBOXD_*_DIR variable elsewhere.`,
      cause,
    });
  }
  const stat = await fs.lstat(dir);
  if (!stat.isDirectory()) {
    throw new SandboxdError('INSECURE_DIRECTORY', `${dir} is not a directory (a symlink or file is in the way)`, {
      remedy: `Remove ${dir} or point the SANDBOXD_*_DIR variable elsewhere.`,
    });
  }
  if (stat.uid !== uid) {
    throw new SandboxdError('INSECURE_DIRECTORY', `${dir} is owned by uid ${stat.uid}, not by you (uid ${uid})`, {
      remedy: `Run \`chown ${uid} ${dir}\` or point the SANDBOXD_*_DIR variable elsewhere.`,
    });
  }
  if ((stat.mode & 0o777 & ~mode) !== 0) {
    throw new SandboxdError('INSECURE_DIRECTORY', `${dir} has mode ${octal(stat.mode)}; it must be at most ${octal(mode)}`, {
      remedy: `Run \`chmod ${octal(mode)} ${dir}\`.`,
    });
  }
}

/** For directories sandboxd itself owns and whose exact mode matters (relay dirs are 0711). */
export async function ensureOwnDir(dir: string, mode: number): Promise<void> {
  await fs.mkdir(dir, { recursive: true, mode });
  await fs.chmod(dir, mode);
  await ensureSecureDir(dir, mode);
}

/** Runs `fn` with a umask so a socket is born with the right mode (DESIGN §3: never chmod-ed). */
export function withUmask<T>(mask: number, fn: () => T): T {
  const previous = process.umask(mask);
  try {
    return fn();
  } finally {
    process.umask(previous);
  }
}
