import path from 'node:path';

export interface ConfigEntry {
  scope: string;
  file: string;
  key: string;
  value: string | null;
}

/** `git config --list --show-origin --show-scope -z`: records of scope, origin, `key\nvalue`. */
export function parseConfigList(output: string): ConfigEntry[] {
  const fields = output.split('\0');
  const entries: ConfigEntry[] = [];
  for (let i = 0; i + 2 < fields.length; i += 3) {
    const [scope = '', origin = '', keyValue = ''] = fields.slice(i, i + 3);
    if (!origin.startsWith('file:')) continue;
    const newline = keyValue.indexOf('\n');
    entries.push({
      scope,
      file: origin.slice('file:'.length),
      key: (newline === -1 ? keyValue : keyValue.slice(0, newline)).toLowerCase(),
      value: newline === -1 ? null : keyValue.slice(newline + 1),
    });
  }
  return entries;
}

/** Files git must never hand the sandbox, whatever the config says (DESIGN §8). */
export function isCredentialStore(file: string): boolean {
  const base = path.basename(file);
  return base === '.git-credentials' || (base === 'credentials' && path.basename(path.dirname(file)) === 'git');
}

function expandPath(value: string, relativeTo: string, home: string): string {
  if (value === '~') return home;
  if (value.startsWith('~/')) return path.join(home, value.slice(2));
  return path.resolve(relativeTo, value);
}

const INCLUDE_KEY = /^include(if\..*)?\.path$/;
/** Keys whose value names a file git reads. */
export const PATH_KEYS = ['core.excludesfile', 'core.attributesfile', 'commit.template', 'gpg.ssh.allowedsignersfile'] as const;

export interface GlobalConfigFiles {
  /** Every file git reads for the global scope, includes followed (in git's order). */
  files: string[];
}

/**
 * The files behind the global scope as git reports them, plus what they name: conditional
 * include targets (mounted even when their condition does not match here, since it may match in
 * the container), the excludes, attributes and commit template files, and git's XDG defaults for
 * the first two. Credential stores are dropped.
 */
export function globalConfigFiles(entries: readonly ConfigEntry[], home: string, xdgConfigHome: string, cwd: string): GlobalConfigFiles {
  const global = entries.filter((entry) => entry.scope === 'global');
  const files: string[] = [];
  const add = (file: string): void => {
    if (!files.includes(file) && !isCredentialStore(file)) files.push(file);
  };
  for (const entry of global) add(entry.file);
  for (const entry of global) {
    if (entry.value === null || entry.value === '') continue;
    if (INCLUDE_KEY.test(entry.key)) add(expandPath(entry.value, path.dirname(entry.file), home));
  }
  const last = (key: string): string | undefined => global.filter((entry) => entry.key === key).at(-1)?.value ?? undefined;
  for (const key of PATH_KEYS) {
    const value = last(key);
    if (value !== undefined && value !== '') add(expandPath(value, cwd, home));
  }
  if (last('core.excludesfile') === undefined) add(path.join(xdgConfigHome, 'git', 'ignore'));
  if (last('core.attributesfile') === undefined) add(path.join(xdgConfigHome, 'git', 'attributes'));
  return { files };
}
