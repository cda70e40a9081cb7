import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { gitFixtures } from './git-fixtures.js';
import { Check, type GuardScope } from '../../daemon/guard/check.js';
import { quarantine, quarantineStamp } from '../../daemon/guard/quarantine.js';
import type { Trust } from '../../daemon/guard/rules.js';

/**
 * The guard's rules on real repositories (made by real git), with the plants written the way a
 * sandbox would write them. Whether a file may have been planted is its ctime against a cutoff;
 * the tests take the two ends (everything is new: cutoff 0; everything is the user's: Infinity)
 * rather than racing the clock.
 */
const { root: rootDir, git, repo } = gitFixtures('sbx-check-');

const EVIL = '[core]\n\tfsmonitor = touch /tmp/pwned\n';

function scopeOf(dir: string, extra: Partial<GuardScope> = {}): GuardScope {
  return { tops: [dir], commonDir: path.join(dir, '.git'), pendingIncludes: [], hooksPaths: [], hooksWritable: false, configWritable: false, ...extra };
}

/** The repository's own config and hooks are read-only in the plan: never findings. */
function trust(cutoffMs: number, dir: string): Trust {
  const held = new Set([path.join(dir, '.git', 'config'), path.join(dir, '.git', 'hooks')]);
  return { cutoffMs, isProtected: (file) => Promise.resolve(held.has(file)) };
}

async function findings(dir: string, cutoffMs: number, deep: boolean, extra: Partial<GuardScope> = {}) {
  const outcome = await new Check(scopeOf(dir, extra), trust(cutoffMs, dir), deep).run();
  return { paths: outcome.findings.map((finding) => path.relative(dir, finding.path)).sort(), outcome };
}

/** Every plant the guard knows of, in one repository. */
function plantEverything(dir: string): void {
  // Git first: once commondir is planted, git itself follows it.
  // A nested repository reached through a gitlink, and a `.git` file naming a place outside.
  const sub = path.join(dir, 'sub');
  mkdirSync(sub);
  git(sub, 'init', '-q');
  writeFileSync(path.join(sub, '.git', 'config'), EVIL);
  git(dir, 'update-index', '--add', '--cacheinfo', `160000,${git(dir, 'rev-parse', 'HEAD')},sub`);
  mkdirSync(path.join(dir, 'out'));
  writeFileSync(path.join(dir, 'out', '.git'), `gitdir: ${rootDir()}\n`);
  git(dir, 'update-index', '--add', '--cacheinfo', `160000,${git(dir, 'rev-parse', 'HEAD')},out`);
  // Reached by nothing git runs from the top: only a deep check finds it.
  mkdirSync(path.join(dir, 'deep', 'er'), { recursive: true });
  git(path.join(dir, 'deep', 'er'), 'init', '-q');
  writeFileSync(path.join(dir, 'deep', 'er', '.git', 'config'), EVIL);
  const common = path.join(dir, '.git');
  writeFileSync(path.join(common, 'commondir'), '/elsewhere\n');
  writeFileSync(path.join(common, 'objects', 'info', 'alternates'), '/home/u/secret/.git/objects\n');
  symlinkSync('/home/u/secret/.git/objects/pack/pack-1.pack', path.join(common, 'objects', 'pack', 'pack-1.pack'));
  mkdirSync(path.join(common, 'worktrees', 'bad'), { recursive: true });
  writeFileSync(path.join(common, 'worktrees', 'bad', 'commondir'), '/elsewhere\n');
  mkdirSync(path.join(common, 'worktrees', 'own'), { recursive: true });
  writeFileSync(path.join(common, 'worktrees', 'own', 'config'), EVIL);
  const module = path.join(common, 'modules', 'evil');
  mkdirSync(path.join(module, 'hooks'), { recursive: true });
  writeFileSync(path.join(module, 'HEAD'), 'ref: refs/heads/main\n');
  writeFileSync(path.join(module, 'config'), EVIL);
  writeFileSync(path.join(module, 'hooks', 'post-checkout'), '#!/bin/sh\n');
  writeFileSync(path.join(module, 'hooks', 'post-checkout.sample'), '#!/bin/sh\n');
}

describe('the guard check', () => {
  it('finds every plant; the deep check also finds nested repositories nothing links to', async () => {
    const dir = repo('planted');
    plantEverything(dir);
    const quick = await findings(dir, 0, false);
    expect(quick.paths).toEqual([
      '.git/commondir',
      '.git/modules/evil/config',
      '.git/modules/evil/hooks/post-checkout',
      '.git/objects/info/alternates',
      '.git/objects/pack/pack-1.pack',
      '.git/worktrees/bad/commondir',
      '.git/worktrees/own/config',
      'out/.git',
      'sub/.git/config',
    ]);
    expect(quick.outcome.findings.find((finding) => finding.path.endsWith('bad/commondir'))?.restore).toBe('../..\n');
    expect(quick.outcome.findings.find((finding) => finding.path.endsWith('sub/.git/config'))?.why).toBe('sets core.fsmonitor is not a key git writes by itself');
    const deep = await findings(dir, 0, true);
    expect(deep.paths).toEqual([...quick.paths, 'deep/er/.git/config'].sort());
    // The directories a change must wake the guard for.
    expect(quick.outcome.watch).toEqual(expect.arrayContaining([dir, path.join(dir, '.git'), path.join(dir, '.git', 'objects', 'info'), path.join(dir, '.git', 'modules'), path.join(dir, '.git', 'worktrees', 'own'), path.join(dir, 'sub'), path.join(dir, 'sub', '.git')]));
  });

  it("what changed before the cutoff is the user's: only what git never writes remains a finding", async () => {
    const dir = repo('old');
    plantEverything(dir);
    expect((await findings(dir, Infinity, true)).paths).toEqual(['.git/commondir', '.git/worktrees/bad/commondir']);
  });

  it('git used normally leaves nothing to find: submodule update --init, worktree add inside the work tree, a nested scratch repository, gc', async () => {
    const lib = repo('normal-lib');
    const dir = repo('normal');
    git(dir, 'submodule', 'add', '-q', lib, 'lib');
    git(dir, 'commit', '-q', '-m', 'lib');
    rmSync(path.join(dir, '.git', 'modules'), { recursive: true });
    rmSync(path.join(dir, 'lib'), { recursive: true });
    git(dir, 'submodule', 'update', '-q', '--init');
    git(dir, 'worktree', 'add', '-q', '-b', 'x', path.join(dir, '.worktrees', 'x'));
    mkdirSync(path.join(dir, 'scratch'));
    git(path.join(dir, 'scratch'), 'init', '-q');
    git(dir, 'gc', '-q');
    expect((await findings(dir, 0, true)).paths).toEqual([]);
  });

  it("respects --git-config writable and --git-hooks writable for the repository's own config and hooks", async () => {
    const dir = repo('opted-out');
    writeFileSync(path.join(dir, '.git', 'config.worktree'), EVIL);
    writeFileSync(path.join(dir, '.git', 'hooks', 'pre-commit'), '#!/bin/sh\n');
    const unprotected: Trust = { cutoffMs: 0, isProtected: () => Promise.resolve(false) };
    const strict = await new Check(scopeOf(dir), unprotected, false).run();
    expect(strict.findings.map((finding) => path.basename(finding.path)).sort()).toEqual(['config.worktree', 'pre-commit']);
    const open = await new Check(scopeOf(dir, { hooksWritable: true, configWritable: true }), unprotected, false).run();
    expect(open.findings).toEqual([]);
  });

  it('a hooks path and an include that did not exist at acquire may only hold samples and allowed keys', async () => {
    const dir = repo('pending');
    mkdirSync(path.join(dir, '.husky', '_'), { recursive: true });
    writeFileSync(path.join(dir, '.husky', '_', 'pre-commit'), '#!/bin/sh\n');
    writeFileSync(path.join(dir, 'team.gitconfig'), EVIL);
    const found = await findings(dir, 0, false, { hooksPaths: [path.join(dir, '.husky', '_')], pendingIncludes: [path.join(dir, 'team.gitconfig')] });
    expect(found.paths).toEqual(['.husky/_/pre-commit', 'team.gitconfig']);
  });
});

describe('quarantine', () => {
  it('renames in place, never over an earlier one, and writes back what is known to be right', async () => {
    const dir = path.join(rootDir(), 'quarantine');
    mkdirSync(dir);
    const file = path.join(dir, 'commondir');
    const stamp = quarantineStamp(Date.UTC(2024, 4, 1, 10, 15, 2, 345));
    expect(stamp).toBe('20240501T101502Z');
    writeFileSync(file, '/elsewhere\n');
    expect(await quarantine({ path: file, why: 'x', restore: '../..\n' }, stamp)).toMatchObject({ movedTo: `${file}.sandboxd-quarantine-${stamp}`, restored: true, error: null });
    expect(readFileSync(file, 'utf8')).toBe('../..\n');
    writeFileSync(file, '/again\n');
    expect((await quarantine({ path: file, why: 'x', restore: null }, stamp)).movedTo).toBe(`${file}.sandboxd-quarantine-${stamp}-2`);
    expect(existsSync(file)).toBe(false);
    const nested = path.join(dir, 'sub', '.git');
    mkdirSync(nested, { recursive: true });
    expect((await quarantine({ path: nested, why: 'x', restore: null }, stamp)).movedTo).toBe(`${nested}.sandboxd-quarantine-${stamp}`);
    expect(await quarantine({ path: path.join(dir, 'gone'), why: 'x', restore: null }, stamp)).toMatchObject({ movedTo: null, error: null });
    expect(readdirSync(dir).sort()).toEqual([`commondir.sandboxd-quarantine-${stamp}`, `commondir.sandboxd-quarantine-${stamp}-2`, 'sub']);
  });
});
