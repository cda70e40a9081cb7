import path from 'node:path';
import type { ConfigContext } from './config-rules.js';
import { parseConfigText, type ConfigEntry } from './config-text.js';
import { listDir, readControlBytes, readControlFile } from './fs-edge.js';
import { allGitDirs, allOddities, controlText, describeGitDir, entryAt, MAX_GIT_DIRS, type Entry, type GitDirFacts } from './git-dir.js';
import { IndexUnreadable, indexGitlinks } from './index-file.js';
import { commondirLeadsHome, configFinding, halfWritten, isSampleHook, mayBePlanted, type Finding, type Trust } from './rules.js';

/** What one repository's guard looks at. */
export interface GuardScope {
  /** The work trees the sessions mount read-write. */
  tops: readonly string[];
  /** The repository's common dir; null when the workdir is in no repository. */
  commonDir: string | null;
  /** Files the repository's config includes from inside it that did not exist at acquire. */
  pendingIncludes: readonly string[];
  /** `core.hooksPath` directories inside the repository. */
  hooksPaths: readonly string[];
  /** Some session may write the repository's hooks / config (`--git-hooks writable`, `--git-config writable`). */
  hooksWritable: boolean;
  configWritable: boolean;
}

export interface CheckOutcome {
  findings: Finding[];
  /** Directories whose changes must trigger the next check. */
  watch: string[];
  /** Bounds that were reached: what lies past them was not looked at. */
  incomplete: string[];
}

/** How deep gitlinks are followed into nested repositories (the host's `git status` recurses). */
const MAX_NESTING = 4;
/** Bounds on one check: work-tree directories walked (deep checks) and git dir entries listed. */
export const MAX_TREE_DIRS = 20_000;
const MAX_GIT_DIR_ENTRIES = 200_000;
/** An index larger than this is not read (its gitlinks go unchecked, and the check says so). */
const INDEX_MAX_BYTES = 128 * 1024 * 1024;
const CONFIG_MAX_BYTES = 1024 * 1024;

function inside(file: string, dirs: readonly string[]): boolean {
  return dirs.some((dir) => file === dir || file.startsWith(`${dir}/`));
}

function gitFileTarget(file: string, text: string | null): string | null {
  const named = /^gitdir: (.+)$/.exec(text ?? '')?.[1];
  return named === undefined ? null : path.resolve(path.dirname(file), named);
}

async function configEntries(entry: Entry | null): Promise<ConfigEntry[]> {
  if (entry?.kind !== 'file') return [];
  try {
    const parsed = parseConfigText(await readControlFile(entry.path, CONFIG_MAX_BYTES));
    return parsed.entries;
  } catch {
    return [];
  }
}

function lastValue(entries: readonly ConfigEntry[], section: string, key: string): string | null {
  let found: string | null = null;
  for (const entry of entries) if (entry.section === section && entry.subsection === null && entry.key === key) found = entry.value;
  return found;
}

/**
 * One check of a repository the sandbox can write: every control position git reads from (the
 * git dirs' `commondir`, `config`, `config.worktree`, `hooks/`, alternates, worktrees' admin dirs,
 * submodules' git dirs, symbolic links anywhere git follows them), every `.git` the host's git
 * would enter through a gitlink, and, when `deep`, every `.git` anywhere in the work trees.
 * Finds what the sandbox may have planted there; moves nothing itself.
 */
export class Check {
  private readonly findings: Finding[] = [];
  private readonly watch = new Set<string>();
  private readonly incomplete: string[] = [];
  /** Git dirs of this repository, by path; a `.git` file naming one of them (back) is git's own. */
  private readonly gitDirs = new Map<string, GitDirFacts>();
  /** Each git dir's work tree (for its index's gitlinks). */
  private readonly workTrees = new Map<string, string>();
  private readonly examined = new Set<string>();
  private knownUrls = new Set<string>();
  private treeDirs = 0;
  private gitDirEntries = 0;

  constructor(
    private readonly scope: GuardScope,
    private readonly trust: Trust,
    private readonly deep: boolean,
  ) {}

  async run(): Promise<CheckOutcome> {
    const { scope } = this;
    for (const top of scope.tops) this.watch.add(top);
    if (scope.commonDir !== null) {
      const common = await entryAt(scope.commonDir);
      if (common?.kind === 'dir') {
        const facts = await describeGitDir(scope.commonDir, common);
        this.knownUrls = await this.urls(facts.config);
        await this.gitDirTree(facts, true);
      }
    }
    for (const top of scope.tops) await this.workTree(top);
    for (const [gitDir, workTree] of [...this.workTrees]) await this.gitlinks(workTree, gitDir, 1);
    for (const file of scope.pendingIncludes) {
      this.watchNearest(file);
      const entry = await entryAt(file);
      if (!scope.configWritable && entry !== null && (await mayBePlanted(entry, this.trust))) this.add(await configFinding(entry, this.context(path.dirname(file))));
    }
    if (!scope.hooksWritable) {
      for (const dir of scope.hooksPaths) {
        this.watchNearest(dir);
        const entry = await entryAt(dir);
        if (entry !== null) await this.hooks(entry);
      }
    }
    return { findings: this.findings, watch: [...this.watch], incomplete: this.incomplete };
  }

  private add(finding: Finding | null): void {
    if (finding !== null && !this.findings.some((known) => known.path === finding.path)) this.findings.push(finding);
  }

  private async urls(config: Entry | null): Promise<Set<string>> {
    const urls = new Set<string>();
    for (const entry of await configEntries(config)) {
      if ((entry.section === 'remote' || entry.section === 'submodule') && entry.key === 'url' && entry.value !== null) urls.add(entry.value);
    }
    return urls;
  }

  private context(dir: string): ConfigContext {
    return { knownUrls: this.knownUrls, workTreeOk: (value) => inside(path.resolve(dir, value), this.scope.tops) };
  }

  /** The nearest existing directory at or above `file`: its change announces `file`. */
  private watchNearest(file: string): void {
    this.watch.add(path.dirname(file));
    this.watch.add(file);
  }

  /** A git dir, its worktrees' admin dirs and its submodules' git dirs. `own`: the repository's, where the policies apply. */
  private async gitDirTree(facts: GitDirFacts, own: boolean): Promise<void> {
    if (facts.truncated) this.incomplete.push(`${facts.dir} holds more than ${MAX_GIT_DIRS} worktrees and submodules; those past them were not looked at`);
    for (const odd of allOddities(facts)) {
      const entry = await entryAt(odd.path);
      if (entry !== null && (await mayBePlanted(entry, this.trust))) this.add({ path: odd.path, why: odd.why, restore: null });
    }
    for (const gitDir of allGitDirs(facts)) {
      this.gitDirs.set(gitDir.dir, gitDir);
      for (const dir of gitDir.dirs) this.watch.add(dir);
      this.watch.add(path.join(gitDir.dir, 'objects', 'pack'));
      await this.gitDir(gitDir, own);
    }
  }

  private async gitDir(gitDir: GitDirFacts, own: boolean): Promise<void> {
    const { scope, trust } = this;
    if (gitDir.commondir !== null) this.add({ path: gitDir.commondir.path, why: 'redirects a self-contained git dir to another one (git never writes one there)', restore: null });
    const configs = [gitDir.config, gitDir.configWorktree, ...gitDir.worktrees.map((worktree) => worktree.configWorktree)];
    if (!(own && scope.configWritable)) {
      for (const config of configs) if (config !== null && (await mayBePlanted(config, trust))) this.add(await configFinding(config, this.context(gitDir.dir)));
    }
    if (!(own && scope.hooksWritable) && gitDir.hooks !== null) await this.hooks(gitDir.hooks);
    if (gitDir.alternates !== null && (await mayBePlanted(gitDir.alternates, trust))) {
      this.add({ path: gitDir.alternates.path, why: "names other object stores: the host's git would read objects from there (and `git repack -a` copy them into this repository)", restore: null });
    }
    for (const worktree of gitDir.worktrees) {
      if (worktree.commondir !== null && !commondirLeadsHome(worktree.admin, worktree.commondirText, gitDir.dir)) {
        this.add({ path: worktree.commondir.path, why: `points at ${worktree.commondirText === '' ? 'nothing (it is empty)' : (worktree.commondirText ?? 'something unreadable')}, not at its own repository`, restore: '../..\n', ...halfWritten(worktree.commondir, worktree.commondirText) });
      }
      const named = worktree.gitdirText === null || worktree.gitdirText === '' ? null : path.resolve(worktree.admin, worktree.gitdirText);
      if (named !== null && path.basename(named) === '.git') this.workTrees.set(worktree.admin, path.dirname(named));
    }
    // A plain clone's work tree holds it; a submodule's git dir names its work tree in its config.
    const holder = scope.tops.find((top) => path.join(top, '.git') === gitDir.dir);
    const workTree = holder ?? lastValue(await configEntries(gitDir.config), 'core', 'worktree');
    if (workTree !== null) this.workTrees.set(gitDir.dir, path.resolve(gitDir.dir, workTree));
    await this.symlinks(gitDir.dir);
  }

  /** A hooks directory git would run from: only the samples git copies may have appeared. */
  private async hooks(hooks: Entry): Promise<void> {
    if (await this.trust.isProtected(hooks.path)) return;
    if (hooks.kind !== 'dir') {
      if (await mayBePlanted(hooks, this.trust)) this.add({ path: hooks.path, why: `is ${hooks.kind === 'symlink' ? 'a symbolic link' : 'not a directory'} where git looks for hooks`, restore: null });
      return;
    }
    this.watch.add(hooks.path);
    for (const child of await listDir(hooks.path)) {
      const entry = await entryAt(path.join(hooks.path, child.name));
      if (entry === null || (entry.kind === 'file' && isSampleHook(child.name))) continue;
      if (await mayBePlanted(entry, this.trust)) this.add({ path: entry.path, why: 'is a hook the host would run', restore: null });
    }
  }

  /**
   * Symbolic links in a git dir: git follows them, and its gc and fetch copy what they reach into
   * the repository (another repository's objects). Git never creates one. A quick check lists the
   * object directories; a deep one walks the whole git dir.
   */
  private async symlinks(dir: string): Promise<void> {
    let pending = this.deep ? [dir] : [path.join(dir, 'objects', 'info'), path.join(dir, 'objects', 'pack')];
    while (pending.length > 0) {
      const next: string[] = [];
      for (const current of pending) {
        for (const child of await listDir(current)) {
          this.gitDirEntries += 1;
          if (this.gitDirEntries > MAX_GIT_DIR_ENTRIES) {
            this.incomplete.push(`the git dirs hold more than ${MAX_GIT_DIR_ENTRIES} entries; symbolic links past them were not looked for`);
            return;
          }
          const full = path.join(current, child.name);
          if (child.isSymbolicLink()) {
            const entry = await entryAt(full);
            if (entry !== null && (await mayBePlanted(entry, this.trust))) this.add({ path: full, why: "is a symbolic link in a git dir: the host's git would follow it", restore: null });
          } else if (this.deep && child.isDirectory() && !(current === dir && child.name === 'modules')) {
            next.push(full);
          }
        }
      }
      pending = next;
    }
  }

  /** A work tree: its own `.git` and, when deep, every `.git` below it. */
  private async workTree(top: string): Promise<void> {
    const dotGit = await entryAt(path.join(top, '.git'));
    if (dotGit !== null) await this.dotGit(dotGit, 1);
    if (!this.deep) return;
    let pending = [top];
    while (pending.length > 0) {
      const next: string[] = [];
      for (const dir of pending) {
        this.treeDirs += 1;
        if (this.treeDirs > MAX_TREE_DIRS) {
          this.incomplete.push(`the work tree holds more than ${MAX_TREE_DIRS} directories; nested repositories past them were not looked for`);
          return;
        }
        for (const child of await listDir(dir)) {
          const full = path.join(dir, child.name);
          if (child.name === '.git') {
            if (dir !== top) {
              const entry = await entryAt(full);
              if (entry !== null) await this.dotGit(entry, 1);
            }
          } else if (child.isDirectory()) {
            next.push(full);
          }
        }
      }
      pending = next;
    }
  }

  /**
   * A `.git` in a work tree: the repository the host's git uses there. Git's own (the common dir
   * itself, or a file naming one of this repository's git dirs that names it back) is fine; one
   * planted during a session must be a repository that runs nothing.
   */
  private async dotGit(entry: Entry, depth: number): Promise<void> {
    if (this.examined.has(entry.path)) return;
    this.examined.add(entry.path);
    this.watch.add(path.dirname(entry.path));
    if (entry.kind === 'dir') {
      if (this.gitDirs.has(entry.path)) return;
      const facts = await describeGitDir(entry.path, entry);
      await this.gitDirTree(facts, false);
      // Its config's worktree is its own directory unless it says otherwise.
      if (!this.workTrees.has(entry.path)) this.workTrees.set(entry.path, path.dirname(entry.path));
      if (depth < MAX_NESTING) await this.gitlinks(path.dirname(entry.path), entry.path, depth + 1);
      return;
    }
    if (entry.kind === 'file') {
      const text = await controlText(entry);
      const target = gitFileTarget(entry.path, text);
      if (target !== null && this.ownGitDir(target)) return;
      if (await mayBePlanted(entry, this.trust)) this.add({ path: entry.path, why: `names ${target ?? 'nothing git reads'}, which is not a git dir of this repository`, restore: null, ...halfWritten(entry, text) });
      return;
    }
    if (await mayBePlanted(entry, this.trust)) this.add({ path: entry.path, why: `is ${entry.kind === 'symlink' ? 'a symbolic link' : 'a special file'} where git looks for a repository`, restore: null });
  }

  /**
   * A `.git` file may name any git dir of this repository, or a place under a `modules/` where one
   * is being cloned: each is checked by the same rules, so it runs nothing. (`git submodule update`
   * writes the file before the git dir is whole and before its `core.worktree` names it back, so
   * neither can be asked for here without racing git itself; git refuses a target that is not a
   * git dir yet.)
   */
  private ownGitDir(target: string): boolean {
    for (const owner of this.gitDirs.values()) {
      if (owner.dir === target || target.startsWith(`${owner.dir}/modules/`) || owner.worktrees.some((admin) => admin.admin === target)) return true;
    }
    return false;
  }

  /** The gitlinks in a git dir's index, each one's path walked (no symbolic links) to its `.git`. */
  private async gitlinks(workTree: string, gitDir: string, depth: number): Promise<void> {
    if (!inside(workTree, this.scope.tops)) return;
    const paths = await this.indexGitlinks(gitDir);
    for (const link of paths) {
      // Where git would look, literally; outside the work trees the sandbox writes nothing.
      const target = path.resolve(workTree, link);
      if (!inside(target, this.scope.tops)) continue;
      const parts = path.relative(workTree, target).split(path.sep).filter((part) => part !== '');
      let dir = workTree;
      let reached = true;
      for (const part of parts) {
        const entry = await entryAt(path.join(dir, part));
        if (entry?.kind !== 'dir') {
          if (entry !== null && entry.kind === 'symlink' && (await mayBePlanted(entry, this.trust))) {
            this.add({ path: entry.path, why: `is a symbolic link where the index has the submodule ${link}`, restore: null });
          }
          reached = false;
          break;
        }
        dir = entry.path;
      }
      this.watch.add(dir);
      if (!reached) continue;
      const dotGit = await entryAt(path.join(dir, '.git'));
      if (dotGit !== null) await this.dotGit(dotGit, depth);
    }
  }

  private async indexGitlinks(gitDir: string): Promise<string[]> {
    const hashBytes = lastValue(await configEntries(this.gitDirs.get(gitDir)?.config ?? (await entryAt(path.join(gitDir, 'config')))), 'extensions', 'objectformat') === 'sha256' ? 32 : 20;
    const read = async (file: string): Promise<{ paths: string[]; sharedIndex: string | null }> => {
      const entry = await entryAt(file);
      if (entry?.kind !== 'file') return { paths: [], sharedIndex: null };
      try {
        return indexGitlinks(await readControlBytes(file, INDEX_MAX_BYTES), hashBytes);
      } catch (error) {
        if (!(error instanceof IndexUnreadable)) this.incomplete.push(`${file} could not be read (${(error as Error).message}); its submodules were not looked at`);
        return { paths: [], sharedIndex: null };
      }
    };
    const index = await read(path.join(gitDir, 'index'));
    const shared = index.sharedIndex === null ? { paths: [] } : await read(path.join(gitDir, `sharedindex.${index.sharedIndex}`));
    return [...new Set([...index.paths, ...shared.paths])];
  }
}
