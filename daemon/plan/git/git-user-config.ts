import { promises as fs } from 'node:fs';
import path from 'node:path';
import { clip } from '../../os/text.js';
import type { RunSubprocess } from '../../os/subprocess.js';
import { entriesByFile, isCredentialStore, isPrivateSshFile, parseConfigList, type ConfigEntry } from './git-config.js';
import { renderConfig } from './git-config-text.js';
import { includedFile, translateConfig, type NamedFile, type Translation } from './git-translate.js';

/** git stops at this include depth (MAX_INCLUDE_DEPTH); deeper files are never read. */
const MAX_INCLUDE_DEPTH = 10;
/** Bound on the files followed: a config with more is not a shape worth a slower acquire. */
const MAX_CONFIG_FILES = 64;
const GIT_TIMEOUT_MS = 5_000;

export interface UserConfigInput {
  /** Each file's entries as the host's git listed them (entriesByFile): those need no other read. */
  listed: ReadonlyMap<string, readonly ConfigEntry[]>;
  git: string;
  env: Record<string, string>;
  hostHome: string;
  /** `$XDG_CONFIG_HOME`, or `~/.config` when unset. */
  xdgConfigHome: string;
  sandboxPath: (file: string) => string;
  run: RunSubprocess;
}

/** One of the user's global config files, translated (see translateConfig). */
export interface TranslatedConfig {
  /** The host file as git names it. */
  path: string;
  /** Its canonical path, mounted read-only there too: the host reads it as config. */
  source: string;
  /** Where the sandbox reads the translation. */
  target: string;
  content: string;
  /** Read for the global scope itself (XDG, then ~/.gitconfig), not through an include. */
  topLevel: boolean;
}

/** A file the config names, mounted read-only as it is. */
export interface NamedFileMount {
  source: string;
  target: string;
  purpose: string;
}

/** A path the user's global config makes the host's git read (present or not). */
export interface NamedPath {
  path: string;
  /** The key that names it, with the file that says so (`include.path in ~/.gitconfig`). */
  what: string;
  kind: 'file' | 'dir';
}

export interface UserConfig {
  /** In git's order level by level: the top-level files (XDG, then ~/.gitconfig) come first. */
  configs: TranslatedConfig[];
  /** Every path the host's git reads for this config: the top-level files, every include target and pathname key, present or not. */
  paths: NamedPath[];
  files: NamedFileMount[];
  /** Every path whose change, appearance or removal changes this answer. */
  watched: string[];
  warnings: string[];
}

interface Pending {
  file: string;
  topLevel: boolean;
  depth: number;
}

type Found = { real: string } | 'missing' | 'other';

async function regularFile(file: string): Promise<Found> {
  try {
    const real = await fs.realpath(file);
    return (await fs.stat(real)).isFile() ? { real } : 'other';
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ENOENT' || (error as NodeJS.ErrnoException).code === 'ENOTDIR' ? 'missing' : 'other';
  }
}

/** What git read of each file: its entries, or why it could not. */
type Parsed = Map<string, readonly ConfigEntry[] | string>;

async function gitList(globalArgs: readonly string[], configArgs: readonly string[], input: UserConfigInput): Promise<readonly ConfigEntry[] | string> {
  const result = await input.run(input.git, [...globalArgs, 'config', ...configArgs, '--list', '--show-origin', '--show-scope', '-z'], {
    // git reads no other config meanwhile: not the global one (whose includes may be anything), not a repository's.
    env: { ...input.env, GIT_CONFIG_GLOBAL: '/dev/null', GIT_CONFIG_NOSYSTEM: '1' },
    clientCwd: '/',
    timeoutMs: GIT_TIMEOUT_MS,
  });
  return result.exitCode === 0 ? parseConfigList(result.stdout) : clip(result.stderr.split('\n')[0] ?? '');
}

/**
 * Files the host's listing did not read (includes whose condition does not hold here, which may
 * hold in the container), read by one git: each is included from its command line, so git parses
 * them, follows their plain includes too, and names each entry's file (entriesByFile). A file
 * that breaks that read is found by reading each alone.
 */
async function readUnlisted(files: readonly string[], input: UserConfigInput): Promise<Parsed> {
  const together = await gitList(
    files.flatMap((file) => ['-c', `include.path=${file}`]),
    ['--includes'],
    input,
  );
  if (typeof together !== 'string') {
    const byFile: Parsed = entriesByFile(together, (entry) => includedFile(entry, input.hostHome));
    // A file that sets nothing is not in the listing.
    for (const file of files) if (!byFile.has(file)) byFile.set(file, []);
    return byFile;
  }
  const alone = await Promise.all(files.map((file) => gitList([], ['--no-includes', '--file', file], input)));
  return new Map(files.map((file, index) => [file, alone[index] ?? []]));
}

interface Read {
  config: TranslatedConfig | null;
  translation: Translation | null;
  warnings: string[];
}

function translated(pending: Pending, found: Found, parsed: readonly ConfigEntry[] | string | undefined, realHome: string, input: UserConfigInput): Read {
  const { file } = pending;
  // An include whose file does not exist is nothing, on the host as in the sandbox.
  if (found === 'missing') return { config: null, translation: null, warnings: [] };
  const lost = (why: string): Read => ({ config: null, translation: null, warnings: [`git: the config file ${file} ${why}; the sandbox goes without its settings`] });
  if (found === 'other' || parsed === undefined) return lost('is not a readable regular file');
  if (typeof parsed === 'string') return lost(`cannot be read by git (${parsed})`);
  const translation = translateConfig({ file, realFile: found.real, entries: parsed, hostHome: input.hostHome, realHome, sandboxPath: input.sandboxPath });
  const rendered = renderConfig(translation.settings, `sandboxd's translation of ${JSON.stringify(file)}: paths as the sandbox sees them; read-only`);
  const warnings = [...translation.warnings];
  for (const refused of rendered.refused) warnings.push(`git: ${file}: a ${refused.section} setting has a name git cannot read back; it is left out of the sandbox`);
  if (parsed.some((entry) => `${entry.key}${entry.value ?? ''}`.includes('\uFFFD'))) {
    warnings.push(`git: ${file} holds text that is not UTF-8; the sandbox's copy may differ from it there`);
  }
  return {
    config: { path: file, source: found.real, target: input.sandboxPath(file), content: rendered.text, topLevel: pending.topLevel },
    translation,
    warnings,
  };
}

/** What a path a key names becomes in the plan: a mount, a warning, or nothing. */
async function namedFile(named: NamedFile, input: UserConfigInput): Promise<{ mount: NamedFileMount | null; warning: string | null }> {
  const none = { mount: null, warning: null };
  if (isCredentialStore(named.path)) return none;
  const found = await regularFile(named.path);
  const exists = found !== 'missing';
  const target = input.sandboxPath(named.path);
  switch (named.kind) {
    case 'secret':
      return exists ? { mount: null, warning: `git: ${named.key} names ${named.path}, which holds a credential; it is not mounted, so git in the sandbox goes without it` } : none;
    case 'directory':
      return exists
        ? { mount: null, warning: `git: ${named.key} names the directory ${named.path}, which is not mounted; to use it in the sandbox, mount it read-only at ${target} (--mount ${named.path}:${target}:ro)` }
        : none;
    default:
      if (typeof found !== 'object') return none;
      if (isPrivateSshFile(named.path, input.hostHome)) {
        return { mount: null, warning: `git: ${named.key} names ${named.path}; files in ~/.ssh other than public keys, known_hosts and allowed signers are never mounted` };
      }
      return { mount: { source: found.real, target, purpose: named.kind === 'signing-key' ? 'git signing key (public)' : `git ${named.key} file` }, warning: null };
  }
}

/**
 * Follows the user's global config files as git would, every include at any depth whether or not
 * its condition holds here (it may hold in the container, on another branch), and translates each
 * (translateConfig). Files are told apart by the name git reaches them by, not their realpath: a
 * file reached as a symlink and as its target is translated once for each, since relative includes
 * in it resolve against the name.
 */
export async function readUserConfig(input: UserConfigInput): Promise<UserConfig> {
  const realHome = await fs.realpath(input.hostHome).catch(() => input.hostHome);
  const out: UserConfig = { configs: [], paths: [], files: [], watched: [], warnings: [] };
  const seen = new Set<string>();
  const named: NamedFile[] = [];
  const parsed: Parsed = new Map(input.listed);
  let level: Pending[] = [path.join(input.xdgConfigHome, 'git', 'config'), path.join(input.hostHome, '.gitconfig')].map((file) => ({ file, topLevel: true, depth: 0 }));
  let attempted = 0;
  let dropped = 0;
  while (level.length > 0) {
    const batch = level.filter((pending) => {
      const target = input.sandboxPath(pending.file);
      if (seen.has(target) || isCredentialStore(pending.file)) return false;
      seen.add(target);
      return true;
    });
    const kept = batch.slice(0, Math.max(0, MAX_CONFIG_FILES - attempted));
    dropped += batch.length - kept.length;
    attempted += kept.length;
    out.watched.push(...kept.map((pending) => pending.file));
    for (const pending of kept) if (pending.topLevel) out.paths.push({ path: pending.file, what: 'your global git config file', kind: 'file' });
    // Only regular files are handed to git: a FIFO would block it.
    const found = await Promise.all(kept.map((pending) => regularFile(pending.file)));
    const unlisted = kept.filter((pending, index) => typeof found[index] === 'object' && !parsed.has(pending.file)).map((pending) => pending.file);
    if (unlisted.length > 0) for (const [file, entries] of await readUnlisted(unlisted, input)) if (!parsed.has(file)) parsed.set(file, entries);
    level = [];
    kept.forEach((pending, index) => {
      const result = translated(pending, found[index] ?? 'other', parsed.get(pending.file), realHome, input);
      out.warnings.push(...result.warnings);
      if (result.config !== null) out.configs.push(result.config);
      for (const file of result.translation?.named ?? []) {
        if (file.kind !== 'repository') out.paths.push({ path: file.path, what: `${file.key} in ${pending.file}`, kind: file.kind === 'directory' ? 'dir' : 'file' });
        if (file.kind !== 'include') named.push(file);
        else if (pending.depth < MAX_INCLUDE_DEPTH) level.push({ file: file.path, topLevel: false, depth: pending.depth + 1 });
      }
    });
  }
  if (dropped > 0) out.warnings.push(`git: your global config names more than ${MAX_CONFIG_FILES} files; the sandbox goes without the other ${dropped}`);
  const files = [...new Map(named.map((file) => [file.path, file])).values()];
  out.watched.push(...files.map((file) => file.path));
  for (const result of await Promise.all(files.map((file) => namedFile(file, input)))) {
    if (result.mount !== null) out.files.push(result.mount);
    if (result.warning !== null) out.warnings.push(result.warning);
  }
  return out;
}
