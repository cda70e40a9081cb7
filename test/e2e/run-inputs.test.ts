import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI, Cleanup, cliEnv, makeSandbox, startAgent, type Agent, type Sandbox } from '../helpers.js';
import { labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterAll(() => cleanup.run());

describe.skipIf(labMissing)('hostile paths, wide workdirs and secrets on the command line (real podman)', () => {
  let sandbox: Sandbox;
  let env: NodeJS.ProcessEnv;
  let image: string;
  let agent: Agent;
  let work: string;

  beforeAll(async () => {
    const lab = podmanLab();
    image = lab.image;
    sandbox = makeSandbox(cleanup);
    agent = await startAgent(sandbox.dir, cleanup);
    env = cliEnv(sandbox, { ...lab.env, SSH_AUTH_SOCK: agent.socket });
    // Not the sandbox dir itself: it holds the test's HOME, so it is a "wide" workdir.
    work = path.join(sandbox.dir, 'work');
    mkdirSync(work, { recursive: true });
    // No daemon is started here: the first `sandboxd run` auto-starts it, as for users.
  });

  function run(cwd: string, runArgs: string[], extra: string[] = [], extraEnv: Record<string, string> = {}) {
    return execa(process.execPath, [CLI, 'run', '--quiet', '--engine', 'podman', ...extra, '--', '--rm', '--network', 'none', ...runArgs], {
      cwd,
      env: { ...env, ...extraEnv },
      extendEnv: false,
      reject: false,
      timeout: 60_000,
    });
  }

  it('a workdir with ":" in its path is mounted (the --mount form) and works', async () => {
    const dir = path.join(sandbox.dir, 'work', 'client:project');
    mkdirSync(dir, { recursive: true });
    writeFileSync(path.join(dir, 'in.txt'), 'colon ok\n');
    const result = await run(dir, [image, 'sh', '-c', 'cat in.txt; pwd']);
    expect(result.stderr).toBe('');
    expect(result.stdout).toBe(`colon ok\n${dir}`);
    expect(result.exitCode).toBe(0);
  });

  it('a workdir with a newline is refused up front with UNSUPPORTED_PATH, never an engine exit 125', async () => {
    const dir = path.join(sandbox.dir, 'work', 'new\nline');
    mkdirSync(dir, { recursive: true });
    const result = await run(dir, [image, 'true']);
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toBe(
      `sandboxd: the workdir path ${JSON.stringify(dir)} contains a newline or another control character, which no engine mount option can carry\n  Rename or move it: a path with a newline, or with both ":" and ",", cannot be mounted.`,
    );
  });

  it('refuses to mount the home directory read-write unless --allow-wide-workdir', async () => {
    const refused = await run(sandbox.home, [image, 'true']);
    expect(refused.exitCode).toBe(1);
    expect(refused.stderr).toContain(`sandboxd: refusing to mount ${sandbox.home} read-write into the sandbox: it is your home directory`);
    const json = await execa(process.execPath, [CLI, 'plan', '--engine', 'podman', '--workdir', '--json'], { cwd: '/', env, extendEnv: false, reject: false });
    expect(JSON.parse(json.stdout)).toEqual({
      error: {
        code: 'WORKDIR_TOO_WIDE',
        message: 'refusing to mount / read-write into the sandbox: it is the root directory',
        remedy: 'Run from the project directory, or pass --allow-wide-workdir (library: allowWideWorkdir) if you mean it.',
      },
    });
    // The home directory writable: the git config files it would hold that do not exist yet could be made there.
    const unprotected = await run(sandbox.home, [image, 'true'], ['--allow-wide-workdir']);
    expect(unprotected.stderr).toContain(`sandboxd: ${path.join(sandbox.home, '.config', 'git', 'config')} (your global git config file) does not exist yet inside the writable mount ${sandbox.home}`);
    const allowed = await run(sandbox.home, [image, 'true'], ['--allow-wide-workdir', '--allow-unprotected-git-paths']);
    expect(allowed.exitCode).toBe(0);
  });

  it('--pass-env values reach the container but never the engine\'s command line', async () => {
    const secret = 'token-value-1b2c';
    const inContainer = await run(work, [image, 'sh', '-c', 'echo "token=$API_TOKEN"'], ['--pass-env', 'API_TOKEN'], { API_TOKEN: secret });
    expect(inContainer.stdout).toBe(`token=${secret}`);

    // A recording podman stands in for the real one, to see the argv and environment it is given.
    const bin = path.join(sandbox.dir, 'fake-bin');
    mkdirSync(bin, { recursive: true });
    const record = path.join(sandbox.dir, 'podman-call.txt');
    writeFileSync(path.join(bin, 'podman'), `#!/bin/sh\nprintf '%s\\n' "$@" > ${record}\necho "env:API_TOKEN=$API_TOKEN" >> ${record}\n`, { mode: 0o755 });
    const recorded = await run(work, [image, 'true'], ['--pass-env', 'API_TOKEN'], { API_TOKEN: secret, PATH: `${bin}:${env.PATH ?? ''}` });
    expect(recorded.exitCode).toBe(0);
    const lines = readFileSync(record, 'utf8').trim().split('\n');
    expect(lines.filter((line) => line.includes(secret))).toEqual([`env:API_TOKEN=${secret}`]);
    expect(lines).toContain('API_TOKEN');
  });

  it('--pass-env SSH_AUTH_SOCK does not cut the container off its agent, and the plan says why', async () => {
    const result = await run(work, [image, 'ssh-add', '-l'], ['--pass-env', 'SSH_AUTH_SOCK']);
    expect(result.stdout).toContain(agent.fingerprint);
    const plan = await execa(process.execPath, [CLI, 'plan', '--engine', 'podman', '--pass-env', 'SSH_AUTH_SOCK', '--json'], { cwd: work, env, extendEnv: false });
    expect((JSON.parse(plan.stdout) as { plan: { warnings: string[] } }).plan.warnings).toContain(
      '--pass-env SSH_AUTH_SOCK is ignored: sandboxd sets SSH_AUTH_SOCK in the container itself',
    );
  });

  it('the user\'s own mount on a target the plan also mounts wins, instead of an engine exit 125', async () => {
    const own = path.join(work, 'my.gitconfig');
    writeFileSync(own, '[user]\n\tname = Mine\n');
    const result = await run(work, ['-v', `${own}:/run/sandboxd/git/config:ro`, image, 'sh', '-c', 'git config user.name']);
    expect({ code: result.exitCode, stderr: result.stderr, stdout: result.stdout }).toEqual({ code: 0, stderr: '', stdout: 'Mine' });
  });

  it('--socket bridges a second host socket, found by a --user 1000 container in the variable it names', async () => {
    const second = await startAgent(sandbox.dir, cleanup, 'second');
    const result = await run(work, ['--user', '1000', image, 'sh', '-c', 'SSH_AUTH_SOCK=$SECOND_SOCK ssh-add -l'], ['--socket', `second=${second.socket}:SECOND_SOCK`]);
    expect(result.stderr).toBe('');
    expect(result.stdout).toContain(second.fingerprint);
    expect(result.stdout).not.toContain(agent.fingerprint);
    const bad = await run(work, [image, 'true'], ['--socket', 'no-equals-sign']);
    expect(bad.exitCode).toBe(2);
    expect(bad.stderr).toContain('sandboxd: --socket no-equals-sign: expected NAME=PATH or NAME=PATH:ENV');
  });
});
