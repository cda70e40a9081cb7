import path from 'node:path';
import { pathKind, type ConfigEntry, type PathKind } from './git-config.js';
import { splitKey, type ConfigSetting } from './git-config-text.js';

/**
 * Translating one of the user's global config files for the sandbox: same keys, same values, same
 * order, but every path and `gitdir:` condition git would expand against HOME or the file's own
 * location is written out absolutely, so it means in any container, for any user and HOME, what
 * it means on the host. The repository is mounted at its host path; the files the config names
 * are mounted under /run/sandboxd/git (see sandboxPath).
 */
export interface TranslateInput {
  /** The file as git names it: the include path, expanded, not normalised (git does neither). */
  file: string;
  /** Its realpath, against which git resolves `gitdir:./…`. */
  realFile: string;
  /** Its entries, in order (`git config --file <file> --list`). */
  entries: readonly ConfigEntry[];
  /** HOME as git sees it on the host, and its realpath (git expands `~/` in conditions to that). */
  hostHome: string;
  realHome: string;
  /** Where the sandbox finds a host file (see sandboxPath). */
  sandboxPath(file: string): string;
}

/** A path the translated file names, with what it is. */
export interface NamedFile {
  /** Absolute, as git would expand it on the host. */
  path: string;
  key: string;
  kind: PathKind | 'include';
}

export interface Translation {
  settings: ConfigSetting[];
  /** Every file an include names (whether or not its condition holds here) and every path a key names. */
  named: NamedFile[];
  warnings: string[];
}

/** Conditions whose meaning does not depend on where the file or HOME is. */
const PORTABLE_CONDITIONS = ['onbranch:', 'hasconfig:remote.*.url:'];

/** Glob characters of wildmatch, which a literal path must not carry into a pattern. */
function escapeGlob(text: string): string {
  return text.replaceAll(/[\\*?[\]]/g, '\\$&');
}

/**
 * `~` and `~/…` against HOME (git's interpolate_path). null for `~user/…`, which names another
 * account's home: the daemon cannot look it up as git does, and no container has it.
 */
function expandTilde(value: string, home: string): string | null {
  if (!value.startsWith('~')) return value;
  const slash = value.indexOf('/');
  if (slash !== -1 && slash !== 1) return null;
  if (slash === -1 && value !== '~') return null;
  return `${home}${slash === -1 ? '' : value.slice(slash)}`;
}

/** Where git reads an include from: `~/` expanded, relative to the including file as named. */
function includeTarget(value: string, input: Pick<TranslateInput, 'file' | 'hostHome'>): string | null {
  const expanded = expandTilde(value, input.hostHome);
  if (expanded === null || expanded.startsWith('%(prefix)/')) return null;
  return path.isAbsolute(expanded) ? expanded : `${input.file.slice(0, input.file.lastIndexOf('/') + 1)}${expanded}`;
}

/** The file an include directive (`include.path`, `includeIf.*.path`) names, as git names it; null for any other entry. */
export function includedFile(entry: ConfigEntry, hostHome: string): string | null {
  const isInclude = entry.key === 'include.path' || (entry.key.startsWith('includeif.') && entry.key.endsWith('.path'));
  return isInclude && entry.value !== null ? includeTarget(entry.value, { file: entry.file, hostHome }) : null;
}

/**
 * A `gitdir:` pattern as git prepares it, made absolute: `~` is the realpath of HOME (the pattern
 * is a glob as a whole, so HOME goes in as it is), `./` the directory of the file's realpath (a
 * literal prefix for git, so escaped here). null when it cannot be reproduced.
 */
function gitdirPattern(pattern: string, input: TranslateInput): string | null {
  if (pattern.startsWith('~')) return expandTilde(pattern, input.realHome);
  if (pattern.startsWith('./')) return `${escapeGlob(path.dirname(input.realFile))}${pattern.slice(1)}`;
  return pattern;
}

function condition(subsection: string, input: TranslateInput): { condition: string } | { lost: string } {
  const kind = /^(gitdir|gitdir\/i):/.exec(subsection)?.[0];
  if (kind !== undefined) {
    const pattern = gitdirPattern(subsection.slice(kind.length), input);
    return pattern === null ? { lost: `its condition "${subsection}" names another user's home` } : { condition: `${kind}${pattern}` };
  }
  if (PORTABLE_CONDITIONS.some((prefix) => subsection.startsWith(prefix))) return { condition: subsection };
  return { lost: `sandboxd does not know its condition "${subsection}"` };
}

function translateInclude(entry: ConfigEntry, setting: ConfigSetting, input: TranslateInput, out: Translation): void {
  const where = `${input.file}: ${entry.key}`;
  if (setting.subsection !== undefined) {
    const translated = condition(setting.subsection, input);
    if ('lost' in translated) {
      out.warnings.push(`git: ${where} is left out of the sandbox: ${translated.lost}`);
      return;
    }
    setting.subsection = translated.condition;
  }
  if (entry.value === null) {
    out.settings.push(setting);
    return;
  }
  const target = includeTarget(entry.value, input);
  if (target === null) {
    out.warnings.push(`git: ${where} "${entry.value}" is left out of the sandbox: it names a file outside your home's reach (another user's home or git's install prefix)`);
    return;
  }
  out.named.push({ path: target, key: entry.key, kind: 'include' });
  out.settings.push({ ...setting, value: input.sandboxPath(target) });
}

/** The value a pathname-typed key takes in the sandbox, and the host file it names. */
function translatePath(kind: PathKind, value: string, input: TranslateInput): { value: string; named: string | null } | null {
  // git expands a signing key's `~` to HOME's realpath: the same file, named under HOME here.
  const expanded = expandTilde(value, input.hostHome);
  if (expanded === null) return null;
  // Relative paths are relative to the cwd, which is the same in the container; `%(prefix)/` is
  // the container's own git.
  if (!path.isAbsolute(expanded)) return { value, named: null };
  if (kind === 'repository') return { value: expanded, named: null };
  // Only the public half of a signing key is ever mounted; ssh-keygen signs with it through the agent.
  const file = kind === 'signing-key' && !expanded.endsWith('.pub') ? `${expanded}.pub` : expanded;
  return { value: input.sandboxPath(file), named: file };
}

/** The file's settings for the sandbox, the files it names, and what cannot be reproduced. */
export function translateConfig(input: TranslateInput): Translation {
  const out: Translation = { settings: [], named: [], warnings: [] };
  for (const entry of input.entries) {
    const parts = splitKey(entry.key);
    if (parts === null) {
      out.warnings.push(`git: ${input.file}: "${entry.key}" is not a key sandboxd can write back; it is left out of the sandbox`);
      continue;
    }
    const setting: ConfigSetting = { ...parts, value: entry.value };
    if (entry.key === 'include.path' || (parts.section === 'includeif' && parts.key === 'path')) {
      translateInclude(entry, setting, input, out);
      continue;
    }
    const kind = pathKind(entry.key);
    const { value } = entry;
    // A signing key that is no path (a `key::` literal, an OpenPGP id) stays as it is.
    if (kind === null || value === null || (kind === 'signing-key' && !/^[~/]/.test(value))) {
      out.settings.push(setting);
      continue;
    }
    const translated = translatePath(kind, value, input);
    if (translated === null) {
      out.warnings.push(`git: ${input.file}: ${entry.key} "${value}" names another user's home, which the sandbox does not have`);
      out.settings.push(setting);
      continue;
    }
    if (translated.named !== null) out.named.push({ path: translated.named, key: entry.key, kind });
    out.settings.push({ ...setting, value: translated.value });
  }
  return out;
}

/**
 * The repository's own config is mounted as it is (read-only, and git reads it in place), so a
 * `~/` path in it resolves against the container's HOME: say so rather than translate it.
 */
export function repositoryHomePaths(entries: readonly ConfigEntry[]): string[] {
  return entries
    .filter((entry) => (entry.scope === 'local' || entry.scope === 'worktree') && entry.value?.startsWith('~') === true)
    .filter((entry) => entry.key === 'include.path' || (entry.key.startsWith('includeif.') && entry.key.endsWith('.path')) || pathKind(entry.key) !== null)
    .map((entry) => `git: ${entry.file}: ${entry.key} "${entry.value ?? ''}" is resolved against the container's HOME in the sandbox, not yours (remedy: name it by its absolute path)`);
}
