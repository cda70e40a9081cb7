import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { chooseGit, CLT_GIT, NO_DEVELOPER_TOOLS, parseDeveloperDir, SELECTION_LINK, SHIM_GIT, XCODE_SELECT, type GitChoiceDeps } from '../../daemon/plan/git/developer-dir.js';
import { gitFactsWatched, gitHostFacts } from '../../daemon/plan/git/git-host.js';
import type { SubprocessResult } from '../../daemon/os/subprocess.js';
import { ROOT } from '../helpers.js';

/** Real output captured on Macs (sources in test/fixtures/mac/SOURCES.md). */
const fixture = (name: string): string => readFileSync(path.join(ROOT, 'test/fixtures/mac', name), 'utf8');

const ENV = { HOME: '/Users/me', PATH: '/usr/bin:/bin', GIT_CONFIG_NOSYSTEM: '1' };

/** Stands in for a Mac: which files exist, what `/usr/bin/git` resolves to, and what xcode-select prints. */
function mac(options: { onPath?: string | null; links?: Record<string, string>; executables?: string[]; selected?: SubprocessResult; platform?: 'darwin' | 'linux' }) {
  const runs: { file: string; args: readonly string[]; env: Record<string, string> }[] = [];
  const deps: GitChoiceDeps = {
    platform: options.platform ?? 'darwin',
    run: (file, args, runOptions) => {
      runs.push({ file, args, env: runOptions.env });
      return Promise.resolve(options.selected ?? { exitCode: 0, stdout: '/Library/Developer/CommandLineTools', stderr: '' });
    },
    findGit: () => Promise.resolve(options.onPath === undefined ? SHIM_GIT : options.onPath),
    realpath: (file) => Promise.resolve(options.links?.[file] ?? file),
    isExecutable: (file) => Promise.resolve((options.executables ?? [CLT_GIT]).includes(file)),
  };
  return { deps, runs };
}

describe("the Mac's git shim (no modal dialogs)", () => {
  it('reads the developer dir as xcode-select prints it, and nothing else', () => {
    const [, printed = ''] = fixture('xcode-select-p.developer-dir-env.txt').split('\n').filter((line) => !line.startsWith('$'));
    expect(parseDeveloperDir(0, `${printed}\n`)).toBe('/Applications/Xcode83.app/Contents/Developer');
    expect(parseDeveloperDir(2, fixture('xcode-select-p.no-developer-dir.macos14.stderr.txt'))).toBeNull();
    expect(parseDeveloperDir(0, '')).toBeNull();
    expect(parseDeveloperDir(0, 'Library/Developer')).toBeNull();
  });

  it('with the Command Line Tools selected, their own git is asked, not the shim', async () => {
    const { deps, runs } = mac({});
    expect(await chooseGit('/usr/bin:/bin', ENV, deps)).toEqual({ git: CLT_GIT, why: null, watched: [SELECTION_LINK, CLT_GIT] });
    expect(runs).toEqual([{ file: XCODE_SELECT, args: ['-p'], env: ENV }]);
  });

  it('with no developer dir (xcode-select fails as on a fresh Mac), no git runs and the warning says how to install one', async () => {
    const { deps, runs } = mac({ selected: { exitCode: 2, stdout: '', stderr: fixture('xcode-select-p.no-developer-dir.macos14.stderr.txt') }, executables: [] });
    expect(await chooseGit('/usr/bin:/bin', ENV, deps)).toEqual({ git: null, why: NO_DEVELOPER_TOOLS, watched: [SELECTION_LINK, CLT_GIT] });
    expect(runs.map((run) => run.file)).toEqual([XCODE_SELECT]);
  });

  it('a selection whose tools are gone (as after an upgrade) counts as none', async () => {
    // git-shim.invalid-active-developer-path.*: the selected dir lost its tools.
    expect(fixture('git-shim.invalid-active-developer-path.catalina.txt')).toContain('invalid active developer path (/Library/Developer/CommandLineTools)');
    const { deps } = mac({ executables: [] });
    expect((await chooseGit('/usr/bin:/bin', ENV, deps)).git).toBeNull();
    const xcode = mac({ selected: { exitCode: 0, stdout: '/Applications/Xcode.app/Contents/Developer', stderr: '' }, executables: ['/Applications/Xcode.app/Contents/Developer/usr/bin/git'] });
    expect(await chooseGit('/usr/bin:/bin', ENV, xcode.deps)).toEqual({
      git: '/Applications/Xcode.app/Contents/Developer/usr/bin/git',
      why: null,
      watched: [SELECTION_LINK, CLT_GIT, '/Applications/Xcode.app/Contents/Developer/usr/bin/git'],
    });
  });

  it('any other git (Homebrew, a link to the shim aside) runs as found; on Linux /usr/bin/git is git', async () => {
    const brew = mac({ onPath: '/opt/homebrew/bin/git', links: { '/opt/homebrew/bin/git': '/opt/homebrew/Cellar/git/2.47.0/bin/git' } });
    expect(await chooseGit('/opt/homebrew/bin:/usr/bin', ENV, brew.deps)).toEqual({ git: '/opt/homebrew/bin/git', why: null, watched: [] });
    expect(brew.runs).toEqual([]);
    const linked = mac({ onPath: '/usr/local/bin/git', links: { '/usr/local/bin/git': SHIM_GIT } });
    expect((await chooseGit('/usr/local/bin:/usr/bin', ENV, linked.deps)).git).toBe(CLT_GIT);
    const linux = mac({ platform: 'linux' });
    expect(await chooseGit('/usr/bin', ENV, linux.deps)).toEqual({ git: SHIM_GIT, why: null, watched: [] });
    expect(linux.runs).toEqual([]);
    expect(await chooseGit('/nowhere', ENV, mac({ onPath: null }).deps)).toMatchObject({ git: null, why: "git is not on the session's PATH" });
  });

  it('without tools the plan says why, and is looked at again when the selection or an install changes', async () => {
    const input = { hostHome: '/nonexistent-home', cwd: '/', path: '/usr/bin', xdgConfigHome: undefined };
    const facts = await gitHostFacts(input, {
      chooseGit: () => Promise.resolve({ git: null, why: NO_DEVELOPER_TOOLS, watched: [SELECTION_LINK, CLT_GIT] }),
      run: () => Promise.reject(new Error('no git runs without one')),
    });
    expect(facts.overrides).toBeNull();
    expect(facts.warnings[0]).toContain(NO_DEVELOPER_TOOLS);
    expect(gitFactsWatched(input, facts)).toEqual(expect.arrayContaining([SELECTION_LINK, CLT_GIT]));
  });
});
