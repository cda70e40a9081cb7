import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, Cleanup, cliEnv, makeSandbox, startAgent, startDaemon, type Sandbox } from '../helpers.js';
import { comparable, COMPARE_SCRIPT, EXPECTED_EMAIL, makeRepos, REPOS, writeRealisticHome, type RepoName } from '../lab/git-homes.js';
import { labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterAll(() => cleanup.run());

/** The container users the issue names: root, a uid alone (HOME unknown to the plan), and a uid with a HOME of the caller's. */
const USERS = {
  root: [],
  'uid 1000': ['--user', '1000:1000'],
  'uid 1000 with HOME=/somewhere': ['--user', '1000:1000', '-e', 'HOME=/somewhere'],
} as const;
type User = keyof typeof USERS;

describe.skipIf(labMissing)('git in the sandbox reads the config the host reads (real git on the host and in real containers)', () => {
  let sandbox: Sandbox;
  let env: NodeJS.ProcessEnv;
  let image: string;
  let repos: Record<RepoName, string>;
  /** What the host's git says in each repository, before any session. */
  const hostView = {} as Record<RepoName, ReturnType<typeof comparable>>;

  /** git on the host as the user runs it; the repositories belong to uid 1000, so the host trusts them on the command line (scope "command", not compared). */
  function onHost(cwd: string, script: string) {
    const trust = { GIT_CONFIG_COUNT: '1', GIT_CONFIG_KEY_0: 'safe.directory', GIT_CONFIG_VALUE_0: '*' };
    return execa('sh', ['-c', script], { cwd, env: { HOME: sandbox.home, GIT_CONFIG_NOSYSTEM: '1', PATH: process.env.PATH ?? '', ...trust }, extendEnv: false });
  }

  async function inside(cwd: string, user: User, script: string) {
    const result = await execa(process.execPath, [CLI, 'run', '--quiet', '--engine', 'podman', '--ssh-agent', 'on', '--', '--rm', '--network', 'none', ...USERS[user], image, 'sh', '-c', script], {
      cwd,
      env,
      extendEnv: false,
      reject: false,
      timeout: 90_000,
    });
    // What a root container writes is root's (rootful podman): give it back to the repository's owner.
    if (user === 'root') await execa('chown', ['-R', '1000:1000', cwd]);
    return result;
  }

  beforeAll(async () => {
    const lab = podmanLab();
    image = lab.image;
    sandbox = makeSandbox(cleanup);
    const agent = await startAgent(sandbox.dir, cleanup);
    writeRealisticHome(sandbox.home, readFileSync(`${agent.keyPath}.pub`, 'utf8'));
    repos = await makeRepos(sandbox.home);
    // The container's uid 1000 owns the repositories, as a rootless user would.
    await execa('chown', ['-R', '1000:1000', path.join(sandbox.home, 'src')]);
    env = cliEnv(sandbox, { ...lab.env, SSH_AUTH_SOCK: agent.socket });
    await startDaemon(env, cleanup);
    for (const name of Object.keys(REPOS) as RepoName[]) hostView[name] = comparable((await onHost(repos[name], COMPARE_SCRIPT)).stdout);
  });

  it.each(Object.keys(USERS) as User[])(
    'as %s, in every repository: the same config, files, identity, alias, insteadOf, excludes and attributes; a commit carries the host\'s identity and a signature the host verifies',
    async (user) => {
      const names = Object.keys(EXPECTED_EMAIL) as RepoName[];
      const message = `signed as ${user}`;
      const commit = `echo @commit; echo "${user}" >> file.txt && git commit -q -am "${message}" && echo committed`;
      const results = await Promise.all(
        names.map(async (name) => {
          const host = hostView[name];
          const result = await inside(repos[name], user, `${COMPARE_SCRIPT}; ${commit}`);
          const log = await onHost(repos[name], 'git log -1 --format="%an <%ae> %s"; git verify-commit HEAD 2>&1');
          return { name, host, result, there: comparable(result.stdout), log: log.stdout };
        }),
      );
      for (const { name, host, result, there, log } of results) {
        expect(result.stderr, name).toBe('');
        expect(host.sections.ident, name).toEqual([`Inc User <${EXPECTED_EMAIL[name]}>`]);
        const { commit: committed, ...sections } = there.sections;
        // The sandbox's own git dir adds exactly one line to its copy of the repository config (docs/git.md).
        const list = sections.list?.filter((line) => line !== 'local\tcore.sharedrepository=0666');
        expect({ ...sections, list }, name).toEqual(host.sections);
        expect(sections.list, name).toContain('local\tcore.sharedrepository=0666');
        expect(committed, name).toEqual(['committed']);
        // The user's own safe.directory, then exactly the repository the sandbox adds.
        expect(host.safe, name).toEqual(['~/src/trusted']);
        expect(there.safe, name).toEqual([path.join(sandbox.home, 'src/trusted'), repos[name], path.join(repos[name], '.git')]);
        // The host's own config names the allowed signers file.
        expect(log, name).toContain(`Inc User <${EXPECTED_EMAIL[name]}> ${message}\nGood "git" signature for *@x.test`);
      }
    },
  );

  it('onbranch: follows a branch switch inside the container', async () => {
    const script = [
      'ident() { i=$(git var GIT_AUTHOR_IDENT); echo "${i%>*}>"; }',
      'ident',
      'git checkout -q -b release/1 && ident',
      'echo change >> file.txt && git commit -q -am "on release" && echo committed',
      'git checkout -q main && ident',
    ].join('; ');
    const result = await inside(repos.plain, 'uid 1000 with HOME=/somewhere', script);
    expect(result.stderr).toBe('');
    expect(result.stdout.split('\n')).toEqual(['Inc User <i@x.test>', 'Inc User <release@x.test>', 'committed', 'Inc User <i@x.test>']);
    expect((await onHost(repos.plain, 'git log -1 --format="%ae" release/1')).stdout).toBe('release@x.test');
  });

  it('git < 2.32, which ignores GIT_CONFIG_GLOBAL, finds the translated ~/.gitconfig under a known container HOME (dual HOME)', async () => {
    // Such a git is older than the ownership check too (2.35.2), which safe.directory on its command line stands in for.
    const script = 'unset GIT_CONFIG_GLOBAL; i=$(git -c safe.directory="*" var GIT_AUTHOR_IDENT); echo "${i%>*}>"; git -c safe.directory="*" config --show-origin user.email';
    const result = await inside(repos.work, 'root', script);
    expect(result.stderr).toBe('');
    expect(result.stdout.split('\n')).toEqual(['Inc User <work@x.test>', 'file:/run/sandboxd/git/home/.config/git/work\twork@x.test']);
  });

  it('the plan names each override it makes and loses nothing of the config; an include that appears is read at the next acquire', async () => {
    const plan = async () => {
      const result = await execa(process.execPath, [CLI, 'plan', '--engine', 'podman', '--json'], { cwd: repos.work, env, extendEnv: false });
      return (JSON.parse(result.stdout) as { plan: { warnings: string[]; notices: string[]; mounts: { target: string; purpose: string }[] } }).plan;
    };
    const absent = path.join(sandbox.home, '.config/git/absent');
    const before = await plan();
    // What sandboxd set that needs no action is a notice, never a warning of every run.
    expect(before.warnings).toEqual([]);
    expect(before.notices).toEqual([`git: safe.directory is set to ${repos.work}, ${repos.work}/.git in the sandbox, so git trusts this repository whichever user owns it there`]);
    // Asked twice, the answer is cached with its files' fingerprint.
    expect((await plan()).mounts.map((mount) => mount.target)).not.toContain('/run/sandboxd/git/home/.config/git/absent');
    writeFileSync(absent, '[user]\n\tname = Appeared\n');
    try {
      expect((await plan()).mounts).toContainEqual(expect.objectContaining({ target: '/run/sandboxd/git/home/.config/git/absent', purpose: `git config from ${absent}` }));
    } finally {
      rmSync(absent);
    }
  });
});
