import path from 'node:path';

export interface ConfigEntry {
  scope: string;
  file: string;
  key: string;
  value: string | null;
}

/**
 * A key with its section and variable name in lower case, as git compares them; the subsection
 * (a credential URL, a remote's name) keeps its case, which git does not fold.
 */
function canonicalKey(key: string): string {
  const first = key.indexOf('.');
  const last = key.lastIndexOf('.');
  if (first === -1) return key.toLowerCase();
  return `${key.slice(0, first).toLowerCase()}${key.slice(first, last)}${key.slice(last).toLowerCase()}`;
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
      key: canonicalKey(newline === -1 ? keyValue : keyValue.slice(0, newline)),
      value: newline === -1 ? null : keyValue.slice(newline + 1),
    });
  }
  return entries;
}

/**
 * Each file's own entries, as `git config --file <file> --list` would give them, read off a
 * listing with includes followed (`--includes --show-origin`): git lists an include directive,
 * then at once the entries of the file it includes (when its condition holds and the file sets
 * anything), then goes on with the includer. `includeTarget` names the file a directive includes,
 * as git names it, or null for an entry that is no include. A file included a second time lists
 * its entries again: only its first inclusion is kept. A file that set nothing is not in the
 * result, and neither is one whose condition did not hold.
 */
export function entriesByFile(entries: readonly ConfigEntry[], includeTarget: (entry: ConfigEntry) => string | null): Map<string, ConfigEntry[]> {
  const files = new Map<string, ConfigEntry[]>();
  // The files being read, innermost last, and whether their entries are being kept.
  let stack: { file: string; own: boolean }[] = [];
  let announced: string | null = null;
  for (const entry of entries) {
    const at = stack.findLastIndex((open) => open.file === entry.file);
    if (at !== -1) stack.length = at + 1;
    else {
      const opened = { file: entry.file, own: !files.has(entry.file) };
      if (opened.own) files.set(entry.file, []);
      // Neither included just now nor an includer: the next top-level file.
      stack = entry.file === announced ? [...stack, opened] : [opened];
    }
    if (stack.at(-1)?.own === true) files.get(entry.file)?.push(entry);
    announced = includeTarget(entry);
  }
  return files;
}

/** Files git must never hand the sandbox, whatever the config says (DESIGN §8). */
export function isCredentialStore(file: string): boolean {
  const base = path.basename(file);
  return base === '.git-credentials' || (base === 'credentials' && path.basename(path.dirname(file)) === 'git');
}

/**
 * In `~/.ssh` only public keys and the lists of known hosts and allowed signers may reach the
 * sandbox: whatever else a config names there (a private key as `http.sslKey` or as a template)
 * stays out.
 */
export function isPrivateSshFile(file: string, hostHome: string): boolean {
  if (path.dirname(file) !== path.join(hostHome, '.ssh')) return false;
  return !/(\.pub|^known_hosts2?|^allowed_signers.*)$/.test(path.basename(file));
}

/**
 * What a value of a pathname-typed key (git-config(1): `~/` and `~user/` are expanded) means:
 * `file`, a file git reads, mounted as it is; `secret`, a file holding a credential, never mounted;
 * `directory`, a directory (hooks, templates, CA certificates), not mounted; `repository`, where
 * repositories are, which the sandbox mounts at their host paths; `signing-key`, the SSH key that
 * signs, of which only the public half is mounted.
 */
export type PathKind = 'file' | 'secret' | 'directory' | 'repository' | 'signing-key';

/** git's pathname-typed keys by section and variable; `http.<url>.*` takes the same as `http.*`. */
const PATH_KEYS: Readonly<Record<string, PathKind>> = {
  'core.excludesfile': 'file',
  'core.attributesfile': 'file',
  'core.hookspath': 'directory',
  'commit.template': 'file',
  'mailmap.file': 'file',
  'blame.ignorerevsfile': 'file',
  'diff.orderfile': 'file',
  'format.signaturefile': 'file',
  'fsck.skiplist': 'file',
  'fetch.fsck.skiplist': 'file',
  'receive.fsck.skiplist': 'file',
  'gpg.ssh.allowedsignersfile': 'file',
  'gpg.ssh.revocationfile': 'file',
  'http.sslcainfo': 'file',
  'http.sslcert': 'file',
  'http.pinnedpubkey': 'file',
  'http.sslkey': 'secret',
  'http.cookiefile': 'secret',
  'http.sslcapath': 'directory',
  'init.templatedir': 'directory',
  'safe.directory': 'repository',
  'user.signingkey': 'signing-key',
};

/** The kind of path a key's value is, or null for a key whose value is not a path. */
export function pathKind(key: string): PathKind | null {
  const first = key.indexOf('.');
  const last = key.lastIndexOf('.');
  const section = key.slice(0, first);
  // Only `http` takes a URL subsection (`fetch.fsck.skiplist` is a three-part key of its own).
  const plain = section === 'http' ? `${section}${key.slice(last)}` : key;
  return PATH_KEYS[plain] ?? null;
}
