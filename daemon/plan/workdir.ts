import path from 'node:path';
import { SandboxdError } from '../../shared/errors.js';
import type { Mount } from '../../shared/contracts/plan.js';

export interface WorkdirInput {
  /** Canonical cwd of the client. */
  cwd: string;
  /** The repository's top level when the cwd is inside one. */
  repoTop: string | null;
  hostHome: string;
  /** The caller said a whole home (or more) is what it means to mount. */
  allowWide: boolean;
  relabel: Mount['relabel'];
}

/**
 * The work tree, read-write at its host path: the repository's top level when the cwd is inside
 * one (git then works from any subdirectory). `/`, the home directory and its ancestors are
 * refused unless asked for: a sandbox started there by accident could rewrite every file you own.
 */
export function workdirMount(input: WorkdirInput): Mount {
  const { cwd, repoTop } = input;
  const source = repoTop !== null && (cwd === repoTop || cwd.startsWith(`${repoTop}/`)) ? repoTop : cwd;
  const toHome = path.relative(source, input.hostHome);
  const wide = source === '/' || toHome === '' || (!toHome.startsWith('..') && !path.isAbsolute(toHome));
  if (wide && !input.allowWide) {
    const what = source === '/' ? 'the root directory' : toHome === '' ? 'your home directory' : `an ancestor of your home directory ${input.hostHome}`;
    throw new SandboxdError('WORKDIR_TOO_WIDE', `refusing to mount ${source} read-write into the sandbox: it is ${what}`);
  }
  return { source, target: source, readOnly: false, purpose: 'workdir', relabel: input.relabel };
}
