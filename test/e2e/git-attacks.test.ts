import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, Cleanup, cliEnv, makeSandbox, waitFor, type Sandbox } from '../helpers.js';
import { fsckStrict, hostGit, plainRepo, refsOf, runIn, waitForFile } from './git-lab.js';
import { labMissing, podmanLab } from './lab.js';

/**
 * The host's git dir under attack from a real container (docs/security.md rule 1): hostile code
 * writes anything under its mounts while the host runs ordinary git, and the host's git dir takes
 * no write. Every payload would create a marker file on the host, in a directory no container
 * sees, or change a file of the host user's; a test passes when no marker exists, those files are
 * as they were, and `git fsck --strict` finds the repository whole. Each shape is the issue's, as
 * root and as `--user 1000`.
 */
const cleanup = new Cleanup();
afterAll(() => cleanup.run());

/** A bound on a condition (the sandbox's git work is synced within about a second), never a sleep. */
const BOUND_MS = 30_000;

const USERS = [
  ['root', undefined, '0:0'],
  ['--user 1000', '1000', '1000:1000'],
] as const;

describe.skipIf(labMissing)("the host's git dir takes no write from a sandbox: attacks from a real container while the host runs git", () => {
  let sandbox: Sandbox;
  let env: NodeJS.ProcessEnv;
  let image: string;
  let src: string;
  let markers: string;
  let logFile: string;

  beforeAll(() => {
    const lab = podmanLab();
    image = lab.image;
    sandbox = makeSandbox(cleanup);
    chmodSync(sandbox.dir, 0o755);
    src = path.join(sandbox.dir, 'src');
    markers = path.join(sandbox.dir, 'markers');
    mkdirSync(src, { recursive: true });
    mkdirSync(markers, { recursive: true });
    writeFileSync(path.join(sandbox.home, '.gitconfig'), '[user]\n\tname = Host User\n\temail = host@example.com\n[init]\n\tdefaultBranch = main\n');
    env = cliEnv(sandbox, lab.env);
    logFile = path.join(sandbox.env.SANDBOXD_LOG_DIR, 'sandboxd.log');
  });

  const marker = (name: string): string => path.join(markers, name);
  const payload = (name: string): string => `touch ${marker(name)}`;
  const repoDir = (name: string, owner: string) => path.join(src, `${name}-${owner.replace(':', '-')}`);

  /** The host uses the repository as the user would next; nothing planted ran and it is whole. */
  async function hostUses(dir: string, name: string): Promise<void> {
    writeFileSync(path.join(dir, 'file.txt'), `changed for ${name}\n`);
    const steps = [await hostGit(dir, 'status', '--porcelain'), await hostGit(dir, 'commit', '-q', '-am', `host commit after ${name}`), await hostGit(dir, 'checkout', '-q', '-b', `after-${name}`), await hostGit(dir, 'gc', '-q')];
    expect({ name, steps: steps.map((step) => step.exitCode), marker: existsSync(marker(name)), fsck: await fsckStrict(dir) }).toEqual({ name, steps: [0, 0, 0, 0], marker: false, fsck: { code: 0, out: '' } });
  }

  it.each(USERS)('%s: logs/HEAD and COMMIT_EDITMSG planted as links to host files, a branch named like a command: the host commits and checks out while the session runs, and writes neither file', async (_name, user, owner) => {
    const dir = await plainRepo(repoDir('reflog', owner), owner);
    const bashrc = path.join(sandbox.home, `.bashrc-${owner.replace(':', '-')}`);
    const gitconfig = path.join(sandbox.home, '.gitconfig');
    writeFileSync(bashrc, '# the host user\'s shell startup\n');
    const before = { bashrc: readFileSync(bashrc, 'utf8'), gitconfig: readFileSync(gitconfig, 'utf8') };
    const ready = path.join(dir, 'ready');
    const go = path.join(dir, 'go');
    const running = runIn(
      env,
      image,
      dir,
      [
        `git checkout -q -b 'x;touch\${IFS}${marker('reflog')};'`,
        `ln -sf ${bashrc} .git/logs/HEAD`,
        `ln -sf ${gitconfig} .git/COMMIT_EDITMSG`,
        `touch ${ready}`,
        waitForFile(go),
        `rm ${ready} ${go}`,
      ].join(' && '),
      { user },
    );
    cleanup.add(() => running.kill('SIGKILL'));
    await waitFor(() => existsSync(ready), 'the plants', BOUND_MS);
    // The host's git, as a user (or an editor) runs it while the session is up.
    for (const args of [['commit', '-q', '--allow-empty', '-m', 'host commit'], ['checkout', '-q', '-b', 'host-side'], ['checkout', '-q', 'main'], ['commit', '-q', '--allow-empty', '-m', 'again']]) {
      expect((await hostGit(dir, ...args)).exitCode).toBe(0);
    }
    writeFileSync(go, '');
    expect((await running).exitCode).toBe(0);
    expect({ bashrc: readFileSync(bashrc, 'utf8'), gitconfig: readFileSync(gitconfig, 'utf8') }).toEqual(before);
    expect(existsSync(marker('reflog'))).toBe(false);
    await hostUses(dir, `reflog-${owner.replace(':', '-')}`);
  });

  // Once, as root (who can write anything there): the heaviest shape, and the container's uid changes nothing of it.
  it.each([USERS[0]])('%s: a gitlink onto a nested repository (with an fsmonitor) staged in an index padded past 128 MiB, among 20,000 directories: the host never reads that index', async (_name, user, owner) => {
    const dir = await plainRepo(repoDir('padded', owner), owner);
    const result = await runIn(
      env,
      image,
      dir,
      [
        // One mkdir per hundred directories: forks are what takes time here.
        'i=0; while [ $i -lt 200 ]; do set --; j=0; while [ $j -lt 100 ]; do set -- "$@" d/$i/$j; j=$((j+1)); done; mkdir -p "$@"; i=$((i+1)); done',
        'mkdir sub && git -C sub init -q && git -C sub -c user.name=x -c user.email=y commit -q --allow-empty -m s',
        `printf '[core]\\n\\tfsmonitor = ${payload(`padded-${owner}`)}\\n' >> sub/.git/config`,
        'git update-index --add --cacheinfo 160000,$(git -C sub rev-parse HEAD),sub',
        // An optional extension (upper-case name) of 128 MiB before the index's trailing checksum, which git does not check.
        'size=$(stat -c %s .git/index); head -c $((size - 20)) .git/index > /tmp/index',
        "printf 'Sdir\\010\\000\\000\\000' >> /tmp/index && head -c 134217728 /dev/zero >> /tmp/index && tail -c 20 .git/index >> /tmp/index && mv /tmp/index .git/index",
        'git ls-files -s sub | grep -q ^160000 && echo staged',
      ].join(' && '),
      { user, timeoutMs: 300_000 },
    );
    expect({ code: result.exitCode, stdout: result.stdout }).toEqual({ code: 0, stdout: 'staged' });
    expect((await hostGit(dir, 'ls-files', '-s')).stdout).not.toContain('160000');
    await hostGit(dir, 'status');
    expect(existsSync(marker(`padded-${owner}`))).toBe(false);
    await execa('rm', ['-rf', path.join(dir, 'sub'), path.join(dir, 'd')]);
    await hostUses(dir, `padded-${owner.replace(':', '-')}`);
  }, 300_000);

  it('150,000 gitlinks in the index and a commondir to a git dir in the work tree: a host git status every moment of the session reads neither', async () => {
    const dir = await plainRepo(repoDir('commondir', '0:0'));
    const ready = path.join(dir, 'ready');
    const go = path.join(dir, 'go');
    const evil = path.join(dir, 'evil');
    const running = runIn(env, image, dir, [
      `mkdir -p ${evil}/hooks && cp -r .git/refs .git/HEAD ${evil}/ && mkdir ${evil}/objects`,
      `printf '[core]\\n\\tfsmonitor = ${payload('commondir')}\\n' > ${evil}/config`,
      `echo ${evil} > .git/commondir`,
      'oid=$(git rev-parse HEAD); i=0; while [ $i -lt 150000 ]; do printf "160000 %s\\tl/%s\\n" $oid $i; i=$((i+1)); done > /tmp/links',
      'git update-index --index-info < /tmp/links && git ls-files | grep -c ^l/',
      `touch ${ready}`,
      waitForFile(go),
      `rm ${ready} ${go}`,
    ].join('; '), { timeoutMs: 300_000 });
    cleanup.add(() => running.kill('SIGKILL'));
    await waitFor(async () => {
      // The host's status, while the sandbox works (an editor runs one every second).
      expect((await hostGit(dir, 'status', '--porcelain')).exitCode).toBe(0);
      return existsSync(ready);
    }, 'the plants', 240_000, 200);
    writeFileSync(go, '');
    expect((await running).stdout).toBe('150000');
    expect(existsSync(marker('commondir'))).toBe(false);
    expect(existsSync(path.join(dir, '.git', 'commondir'))).toBe(false);
    await execa('rm', ['-rf', evil]);
    await hostUses(dir, 'commondir');
  }, 300_000);

  it("520 directories holding a HEAD in the git dir's modules/: the next session of the repository works, and the host's git dir has none of them", async () => {
    const dir = await plainRepo(repoDir('modules-flood', '1000:1000'), '1000:1000');
    const flood = await runIn(env, image, dir, "i=0; while [ $i -lt 520 ]; do mkdir -p .git/modules/m$i && echo 'ref: refs/heads/main' > .git/modules/m$i/HEAD; i=$((i+1)); done; echo flooded", { user: '1000' });
    expect(flood.stdout).toBe('flooded');
    const next = await runIn(env, image, dir, 'git status --porcelain && if [ -d .git/modules ]; then echo present; else echo none; fi', { user: '1000' });
    expect({ code: next.exitCode, stdout: next.stdout, stderr: next.stderr }).toEqual({ code: 0, stdout: 'none', stderr: '' });
    expect(existsSync(path.join(dir, '.git', 'modules'))).toBe(false);
    await hostUses(dir, 'modules-flood');
  });

  it("200,000 empty files in the sandbox's git dir, past the sync's bound, beside a reflog planted as a link: the session ends and run says why, the host's git dir has none of them, and the next session starts afresh", async () => {
    const dir = await plainRepo(repoDir('files-flood', '1000:1000'), '1000:1000');
    const startup = marker('files-flood-bashrc');
    writeFileSync(startup, "# the host user's\n");
    const never = path.join(dir, 'never');
    // 200 directories of 1,000 empty files under refs/heads; then the container waits to be ended.
    const flood = await runIn(env, image, dir, [`ln -sf ${startup} .git/logs/HEAD`, 'cd .git/refs/heads', 'for i in $(seq 1 200); do mkdir -p flood/d$i && (cd flood/d$i && seq 1 1000 | xargs touch); done', 'cd - >/dev/null', waitForFile(never), 'echo not-ended'].join(' && '), { user: '1000' });
    expect(flood.exitCode).not.toBe(0);
    expect(flood.stdout).not.toContain('not-ended');
    expect(flood.stderr).toContain("sandboxd: the sandbox's git work in");
    expect(flood.stderr).toContain('was not brought home: the sandbox\'s git dir holds more than 100000 branches, tags and directories of them');
    expect(readFileSync(logFile, 'utf8')).toContain("the sandbox's git dir exceeded a bound; its sessions end");
    expect({ flood: existsSync(path.join(dir, '.git', 'refs', 'heads', 'flood')), startup: readFileSync(startup, 'utf8') }).toEqual({ flood: false, startup: "# the host user's\n" });
    const next = await runIn(env, image, dir, 'git status --porcelain && if [ -d .git/refs/heads/flood ]; then echo present; else echo none; fi', { user: '1000' });
    expect({ code: next.exitCode, stdout: next.stdout, stderr: next.stderr }).toEqual({ code: 0, stdout: 'none', stderr: '' });
    await hostUses(dir, 'files-flood');
    expect(readFileSync(startup, 'utf8')).toBe("# the host user's\n");
  }, 300_000);

  it.each(USERS)("%s: the sandbox's own hooks and config (writable when asked) never run on the host", async (_name, user, owner) => {
    const dir = await plainRepo(repoDir('own-config', owner), owner);
    const name = `own-config-${owner.replace(':', '-')}`;
    const result = await runIn(
      env,
      image,
      dir,
      [
        `git config core.fsmonitor '${payload(name)}'`,
        `git config alias.st '!${payload(name)}'`,
        `printf '#!/bin/sh\\n${payload(name)}\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit`,
        `printf '#!/bin/sh\\n${payload(name)}\\n' > .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout`,
        'echo planted',
      ].join(' && '),
      { user, flags: ['--ssh-agent', 'off', '--git-config', 'writable', '--git-hooks', 'writable'] },
    );
    expect(result.stdout).toBe('planted');
    expect((await hostGit(dir, 'config', '--local', 'core.fsmonitor')).stdout).toBe('');
    expect(readdirSync(path.join(dir, '.git', 'hooks')).filter((hook) => !hook.endsWith('.sample'))).toEqual([]);
    await hostUses(dir, name);
  });

  it.each(USERS)('%s: a gitlink onto a nested repository the sandbox made and committed is held back under refs/sandboxd/ and named; the host never enters it', async (_name, user, owner) => {
    const dir = await plainRepo(repoDir('gitlink', owner), owner);
    const name = `gitlink-${owner.replace(':', '-')}`;
    const go = path.join(dir, 'go');
    const committed = path.join(dir, 'committed');
    const running = runIn(
      env,
      image,
      dir,
      [
        'mkdir -p vendor/evil && git -C vendor/evil init -q && git -C vendor/evil -c user.name=x -c user.email=y commit -q --allow-empty -m s',
        `printf '[core]\\n\\tfsmonitor = ${payload(name)}\\n' >> vendor/evil/.git/config`,
        'git add vendor/evil 2>/dev/null',
        'git -c user.name=x -c user.email=y commit -q -m "vendor a repository"',
        `touch ${committed}`,
        waitForFile(go),
        `rm ${go} ${committed}`,
      ].join(' && '),
      { user },
    );
    cleanup.add(() => running.kill('SIGKILL'));
    await waitFor(() => existsSync(committed), 'the commit inside', BOUND_MS);
    // While the session runs, the commit waits: its sandbox could still plant a repository there.
    const listed = JSON.parse((await execa(process.execPath, [CLI, 'sessions', 'ls', '--json'], { env, extendEnv: false })).stdout) as { git: { repository: string } | null }[];
    expect(listed.map((session) => session.git?.repository)).toContain(path.join(dir, '.git'));
    expect((await hostGit(dir, 'log', '-1', '--format=%s', 'main')).stdout).toBe('init');
    expect((await hostGit(dir, 'status', '--porcelain')).exitCode).toBe(0);
    writeFileSync(go, '');
    const finished = await running;
    expect(finished.exitCode).toBe(0);
    const kept = [...(await refsOf(dir)).keys()].filter((ref) => ref.startsWith('refs/sandboxd/'));
    expect(kept).toEqual([expect.stringMatching(/^refs\/sandboxd\/ses_[A-Za-z0-9]+\/main$/) as string]);
    expect(finished.stderr).toContain(`sandboxd: the sandbox's refs/heads/main was not applied: it adds the submodule vendor/evil, and ${path.join(dir, 'vendor', 'evil')} holds a repository the host did not have`);
    expect(finished.stderr).toContain(`to take it in: git switch main && git merge --autostash ${kept[0] ?? ''}`);
    expect((await hostGit(dir, 'log', '-1', '--format=%s', 'main')).stdout).toBe('init');
    await hostGit(dir, 'status');
    expect(existsSync(marker(name))).toBe(false);
    await execa('rm', ['-rf', path.join(dir, 'vendor')]);
    await hostUses(dir, name);
  });

  /** A superproject with a populated submodule at `a/b/lib`. */
  async function superproject(name: string, owner: string): Promise<string> {
    const lib = await plainRepo(path.join(src, `${name}-lib`));
    const dir = await plainRepo(path.join(src, name));
    await hostGit(dir, '-c', 'protocol.file.allow=always', 'submodule', 'add', '-q', lib, 'a/b/lib');
    await hostGit(dir, 'commit', '-q', '-m', 'add lib');
    await execa('chown', ['-R', owner, dir]);
    return dir;
  }

  it.each(USERS)("%s: the path to a submodule cannot be renamed, removed or repointed, so the host's git never enters a repository the sandbox made there", async (_name, user, owner) => {
    const name = `ancestor-${owner.replace(':', '-')}`;
    const dir = await superproject(name, owner);
    const evil = `${dir}/evilgit`;
    const result = await runIn(
      env,
      image,
      dir,
      [
        'mv a a2 2>/dev/null && echo a-moved || echo a-refused',
        'mv a/b a/b2 2>/dev/null && echo b-moved || echo b-refused',
        'rm -rf a/b/lib 2>/dev/null; test -e a/b/lib/.git && echo lib-kept || echo lib-gone',
        `mkdir -p ${evil}/objects ${evil}/refs && echo 'ref: refs/heads/main' > ${evil}/HEAD && printf '[core]\\n\\tfsmonitor = ${payload(name)}\\n' > ${evil}/config`,
        `echo 'gitdir: ${evil}' > a/b/lib/.git 2>/dev/null && echo link-written || echo link-refused`,
      ].join('; '),
      { user },
    );
    expect(result.stdout.split('\n')).toEqual(['a-refused', 'b-refused', 'lib-kept', 'link-refused']);
    await hostGit(dir, 'status');
    await hostGit(path.join(dir, 'a', 'b', 'lib'), 'status');
    expect(existsSync(marker(name))).toBe(false);
    expect(await fsckStrict(path.join(dir, 'a', 'b', 'lib'))).toEqual({ code: 0, out: '' });
    await execa('rm', ['-rf', evil]);
    await hostUses(dir, name);
  });

  it('an unpopulated submodule gets an empty read-only directory the sandbox cannot fill; one whose git dir lies in the work tree is refused', async () => {
    const dir = await superproject('unpopulated', '0:0');
    await hostGit(dir, 'submodule', 'deinit', '-q', '-f', 'a/b/lib');
    const result = await runIn(env, image, dir, `mkdir a/b/lib/.git 2>/dev/null && echo filled || echo refused; printf '[core]\\n\\tfsmonitor = ${payload('unpopulated')}\\n' > a/b/lib/x 2>/dev/null || echo read-only`);
    expect(result.stdout.split('\n')).toEqual(['refused', 'read-only']);
    await hostGit(dir, 'status');
    expect(existsSync(marker('unpopulated'))).toBe(false);
    // An embedded git dir (not absorbed): the sandbox could write its config.
    await execa('rm', ['-rf', path.join(dir, 'a', 'b', 'lib')]);
    await hostGit(dir, '-c', 'protocol.file.allow=always', 'clone', '-q', path.join(src, 'unpopulated-lib'), 'a/b/lib');
    const refused = await execa(process.execPath, [CLI, 'plan', '--engine', 'podman', '--json'], { cwd: dir, env, extendEnv: false, reject: false });
    expect(JSON.parse(refused.stdout)).toMatchObject({ error: { code: 'REPOSITORY_UNSUPPORTED', remedy: expect.stringContaining('git submodule absorbgitdirs') as string } });
  });

  /** The user's global config for the dotfiles tests, put back afterwards. */
  function globalConfig(extra: string): void {
    const plain = '[user]\n\tname = Host User\n\temail = host@example.com\n[init]\n\tdefaultBranch = main\n';
    writeFileSync(path.join(sandbox.home, '.gitconfig'), `${plain}${extra}`);
    cleanup.add(() => {
      writeFileSync(path.join(sandbox.home, '.gitconfig'), plain);
    });
  }

  it('a dotfiles repository as the work tree: an include of the global config that does not exist there yet refuses the session, naming the key, the file and the option', async () => {
    const dotfiles = await plainRepo(repoDir('dotfiles-include', '0:0'));
    const later = path.join(dotfiles, 'later.gitconfig');
    globalConfig(`[include]\n\tpath = ${later}\n`);
    const plant = `printf '[core]\\n\\tfsmonitor = ${payload('dotfiles-include')}\\n' >> ${later}`;
    const refused = await execa(process.execPath, [CLI, 'run', '--quiet', '--json', '--engine', 'podman', '--ssh-agent', 'off', '--', '--rm', image, 'sh', '-c', plant], { cwd: dotfiles, env, extendEnv: false, reject: false });
    expect(JSON.parse(refused.stdout)).toMatchObject({
      error: {
        code: 'GIT_PATH_UNPROTECTED',
        message: `${later} (include.path in ${path.join(sandbox.home, '.gitconfig')}) does not exist yet inside the writable mount ${dotfiles}: the sandbox could make what your host's git reads there`,
        remedy: expect.stringContaining('--allow-unprotected-git-paths') as string,
      },
    });
    expect(existsSync(later)).toBe(false);
    // Once it exists, the sandbox gets it read-only.
    writeFileSync(later, '[user]\n');
    const readOnly = await runIn(env, image, dotfiles, `${plant} 2>/dev/null && echo written || echo refused`);
    expect(readOnly.stdout).toBe('refused');
    await execa('git', ['-C', src, 'status'], { env: { HOME: sandbox.home, GIT_CONFIG_NOSYSTEM: '1', PATH: process.env.PATH ?? '' }, reject: false });
    expect(existsSync(marker('dotfiles-include'))).toBe(false);
  });

  it.each(USERS)('%s: init.templateDir in a dotfiles work tree is read-only in the sandbox, so a repository the host inits later runs no hook of its', async (_name, user, owner) => {
    const name = `template-${owner.replace(':', '-')}`;
    const dotfiles = await plainRepo(repoDir('dotfiles-template', owner), owner);
    const templates = path.join(dotfiles, 'git-templates');
    mkdirSync(path.join(templates, 'hooks'), { recursive: true });
    await execa('chown', ['-R', owner, templates]);
    globalConfig(`[init]\n\ttemplateDir = ${templates}\n`);
    const result = await runIn(env, image, dotfiles, `printf '#!/bin/sh\\n${payload(name)}\\n' > ${templates}/hooks/post-commit 2>/dev/null && chmod +x ${templates}/hooks/post-commit && echo planted || echo refused`, { user });
    expect(result.stdout).toBe('refused');
    // The host's git, as the user runs it next, with the user's global config.
    const fresh = path.join(src, `${name}-fresh`);
    const hostEnv = { HOME: sandbox.home, GIT_CONFIG_NOSYSTEM: '1', PATH: process.env.PATH ?? '' };
    await execa('git', ['init', '-q', fresh], { env: hostEnv });
    await execa('git', ['-C', fresh, 'commit', '-q', '--allow-empty', '-m', 'x'], { env: hostEnv });
    expect(existsSync(marker(name))).toBe(false);
  });

  it('a diverged branch waits under refs/sandboxd/ and is named: in sessions ls while the session runs, on stderr when it ends, in the log; the command named takes it in', async () => {
    const dir = await plainRepo(repoDir('diverged', '1000:1000'), '1000:1000');
    const [started, go1, go2] = ['started', 'go1', 'go2'].map((name) => path.join(dir, name));
    const running = runIn(env, image, dir, [`touch ${started ?? ''}`, waitForFile(go1 ?? ''), 'echo sandbox >> file.txt', `git commit -q -am "the sandbox's"`, waitForFile(go2 ?? ''), `rm ${[started, go1, go2].join(' ')}`].join(' && '), { user: '1000' });
    cleanup.add(() => running.kill('SIGKILL'));
    await waitFor(() => existsSync(started ?? ''), 'the container to start', BOUND_MS);
    // The host moves main on its own, from the same start as the sandbox's copy.
    await hostGit(dir, 'commit', '-q', '--allow-empty', '-m', 'the host goes on');
    writeFileSync(go1 ?? '', '');
    const list = async () => JSON.parse((await execa(process.execPath, [CLI, 'sessions', 'ls', '--json'], { env, extendEnv: false })).stdout) as { git: { held: { ref: string; keptAs: string | null; reason: string }[] } | null }[];
    const held = await waitFor(async () => (await list()).flatMap((session) => session.git?.held ?? [])[0], 'the held branch in sessions ls', BOUND_MS);
    expect(held).toMatchObject({ ref: 'refs/heads/main', keptAs: expect.stringMatching(/^refs\/sandboxd\/ses_[A-Za-z0-9]+\/main$/) as string, reason: "the host's main has commits the sandbox's does not (diverged)" });
    writeFileSync(go2 ?? '', '');
    const finished = await running;
    expect(finished.exitCode).toBe(0);
    const keptAs = held.keptAs ?? '';
    expect(finished.stderr.split('\n')).toEqual([
      `sandboxd: the sandbox's refs/heads/main was not applied: the host's main has commits the sandbox's does not (diverged); it is kept as ${keptAs}`,
      `  to take it in: git switch main && git merge --autostash ${keptAs}`,
    ]);
    expect(readFileSync(logFile, 'utf8')).toContain(`"keptAs":"${keptAs}"`);
    expect((await hostGit(dir, 'log', '-1', '--format=%s', 'main')).stdout).toBe('the host goes on');
    expect((await hostGit(dir, 'log', '-1', '--format=%s', keptAs)).stdout).toBe("the sandbox's");
    expect((await hostGit(dir, 'merge', '-q', '--no-edit', '--autostash', keptAs)).exitCode).toBe(0);
    expect((await hostGit(dir, 'log', '--format=%s', 'main')).stdout.split('\n')).toEqual(expect.arrayContaining(["the sandbox's", 'the host goes on']));
    await hostUses(dir, 'diverged');
  });

  it("objects the sandbox planted as links to host files never reach the host's store: the commit is named as not arrived", async () => {
    const dir = await plainRepo(repoDir('linked-object', '0:0'));
    const secret = path.join(sandbox.home, 'secret.txt');
    writeFileSync(secret, 'host secret\n');
    const result = await runIn(env, image, dir, [
      'echo inside >> file.txt',
      'git commit -q -am inside',
      // The new blob's loose object becomes a link to a host file the sandbox cannot see.
      `blob=$(git rev-parse HEAD:file.txt); rest=\${blob#??}; f=.git/objects/\${blob%"$rest"}/$rest; rm -f $f && ln -s ${secret} $f && echo planted`,
    ].join(' && '));
    expect(result.stdout).toBe('planted');
    expect(result.stderr).toContain("sandboxd: the sandbox's refs/heads/main was not applied: its commit");
    expect((await hostGit(dir, 'log', '-1', '--format=%s', 'main')).stdout).toBe('init');
    await hostUses(dir, 'linked-object');
  });

  it("a FIFO as the sandbox's HEAD and as a branch: the daemon never blocks on them, and the session ends as usual", async () => {
    const dir = await plainRepo(repoDir('fifo', '0:0'));
    const result = await runIn(env, image, dir, 'git branch spare && rm .git/refs/heads/spare && mkfifo .git/refs/heads/spare && rm .git/HEAD && mkfifo .git/HEAD && echo planted', { timeoutMs: 60_000 });
    expect({ code: result.exitCode, stdout: result.stdout }).toEqual({ code: 0, stdout: 'planted' });
    const next = await runIn(env, image, dir, 'git log -1 --format=%s');
    expect(next.stdout).toBe('init');
    await hostUses(dir, 'fifo');
  });
});
