import { entryName, type ConfigEntry } from './config-text.js';

/**
 * What a git config file that appeared or changed during a session (a new submodule's, a nested
 * repository's, a `config.worktree`) may hold: the keys git itself writes when it clones, inits,
 * adds a submodule or a worktree, and a few settings that only change how git treats data. An
 * allowlist, not a denylist: anything else (`core.fsmonitor`, `core.hooksPath`, `core.sshCommand`,
 * pagers and editors, `alias.*`, `filter.*`, `diff.*.command`, `include*`, `remote.*.uploadpack`,
 * `credential.*`, and every key added to git later) is a finding.
 */
const PLAIN_KEYS = new Set([
  'core.repositoryformatversion',
  'core.filemode',
  'core.bare',
  'core.logallrefupdates',
  'core.ignorecase',
  'core.precomposeunicode',
  'core.symlinks',
  'core.autocrlf',
  'core.eol',
  'core.safecrlf',
  'core.quotepath',
  'core.sparsecheckout',
  'core.sparsecheckoutcone',
  'core.splitindex',
  'core.untrackedcache',
  'core.checkstat',
  'core.trustctime',
  'core.abbrev',
  'core.compression',
  'core.loosecompression',
  'core.bigfilethreshold',
  'core.commitgraph',
  'core.multipackindex',
  'core.preloadindex',
  'extensions.objectformat',
  'extensions.worktreeconfig',
  'extensions.partialclone',
  'extensions.preciousobjects',
  'extensions.noop',
  'extensions.refstorage',
  'extensions.relativeworktrees',
  'user.name',
  'user.email',
  'pull.rebase',
  'pull.ff',
  'push.default',
  'push.autosetupremote',
  'fetch.prune',
  'fetch.prunetags',
  'init.defaultbranch',
  'merge.ff',
  'merge.conflictstyle',
  'rebase.autosquash',
  'rebase.autostash',
  'commit.gpgsign',
  'tag.gpgsign',
  'color.ui',
  'index.version',
  'index.skiphash',
  'feature.manyfiles',
  'gc.auto',
  'gc.autodetach',
  'maintenance.auto',
]);

const REMOTE_KEYS = new Set(['fetch', 'push', 'mirror', 'tagopt', 'prune', 'prunetags', 'promisor', 'partialclonefilter', 'skipdefaultupdate', 'skipfetchall']);
const BRANCH_KEYS = new Set(['remote', 'pushremote', 'merge', 'rebase', 'description']);
const SUBMODULE_KEYS = new Set(['active', 'branch', 'fetchrecursesubmodules', 'ignore', 'shallow']);
/** `submodule.<name>.update` may also be `!command`, which runs. */
const SUBMODULE_UPDATE_MODES = new Set(['checkout', 'rebase', 'merge', 'none']);

export interface ConfigContext {
  /**
   * URLs the repository's own (read-only) config names (`remote.*.url`, `submodule.*.url`): a new
   * submodule's clone records the one it came from.
   */
  knownUrls: ReadonlySet<string>;
  /** The work tree a `core.worktree` may name (resolved against the config's git dir), if any. */
  workTreeOk(value: string): boolean;
}

/**
 * A URL the host's `git fetch` may be pointed at from a file the sandbox wrote: one the repository
 * already names, or a network URL. Never `<helper>::…` (`ext::sh -c …` runs a command) and never
 * a local path, which would copy another repository of yours into one the sandbox reads.
 */
function urlOk(value: string | null, context: ConfigContext): boolean {
  if (value === null) return false;
  if (context.knownUrls.has(value)) return true;
  if (/^[A-Za-z][A-Za-z0-9+.-]*::/.test(value)) return false;
  if (/^(https?|ssh|git|git\+ssh|ssh\+git):\/\/[^/]/i.test(value)) return true;
  if (value.includes('://')) return false;
  // scp-like `host:path` (git reads it as ssh when no slash comes before the colon).
  return /^[^/:]+:/.test(value) && !value.startsWith('-');
}

/** Why one entry is not allowed, or null when it is. */
export function disallowedEntry(entry: ConfigEntry, context: ConfigContext): string | null {
  const name = entryName(entry);
  const { section, subsection, key, value } = entry;
  if (subsection === null) {
    if (name === 'core.worktree') return value !== null && context.workTreeOk(value) ? null : `${name} names another work tree`;
    return PLAIN_KEYS.has(name) ? null : `${name} is not a key git writes by itself`;
  }
  if (section === 'remote') {
    if (key === 'url' || key === 'pushurl') return urlOk(value, context) ? null : `${name} = ${value ?? ''} is a local path or a transport command`;
    return REMOTE_KEYS.has(key) ? null : `${name} is not a key git writes by itself`;
  }
  if (section === 'branch') return BRANCH_KEYS.has(key) ? null : `${name} is not a key git writes by itself`;
  if (section === 'submodule') {
    if (key === 'url') return urlOk(value, context) ? null : `${name} = ${value ?? ''} is a local path or a transport command`;
    if (key === 'update') return value !== null && SUBMODULE_UPDATE_MODES.has(value) ? null : `${name} = ${value ?? ''} can run a command`;
    return SUBMODULE_KEYS.has(key) ? null : `${name} is not a key git writes by itself`;
  }
  return `${name} is not a key git writes by itself`;
}

/** The first reasons (at most `limit`) a config's entries are not allowed; empty when all are. */
export function disallowedEntries(entries: readonly ConfigEntry[], context: ConfigContext, limit = 3): string[] {
  const reasons: string[] = [];
  for (const entry of entries) {
    const why = disallowedEntry(entry, context);
    if (why !== null && !reasons.includes(why)) reasons.push(why);
    if (reasons.length >= limit) break;
  }
  return reasons;
}
