import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { applyPlan } from '../../client/apply-plan.js';
import { mountDestination, parseRunArgs } from '../../client/run-args.js';
import { SandboxdError } from '../../shared/errors.js';

const plan = (args: string[], spawnEnv: Record<string, string> = {}, globalArgs: string[] = []) => ({ args, spawnEnv, globalArgs });

function destinations(args: readonly string[]): string[] {
  return parseRunArgs(args).options.map(mountDestination).filter((target) => target !== null);
}

describe('applyPlan: where the image starts', () => {
  it.each([
    ['no leading run', ['--rm', 'img', 'sh'], ['--rm', '-v', '/a:/b', 'img', 'sh']],
    ['a leading run stays first', ['run', '--rm', 'img'], ['run', '--rm', '-v', '/a:/b', 'img']],
    ['values of long options', ['--user', '1000', '--name', 'x', '--network', 'none', 'img', 'ls'], ['--user', '1000', '--name', 'x', '--network', 'none', '-v', '/a:/b', 'img', 'ls']],
    ['values of short options', ['-u', '1000', '-w', '/w', '-h', 'box', 'img'], ['-u', '1000', '-w', '/w', '-h', 'box', '-v', '/a:/b', 'img']],
    ['short clusters and attached values', ['-it', '-eFOO=1', '-w/w', 'img'], ['-it', '-eFOO=1', '-w/w', '-v', '/a:/b', 'img']],
    ['a cluster ending in a value option', ['-itu', '1000', 'img'], ['-itu', '1000', '-v', '/a:/b', 'img']],
    ['--name=value of an option no table knows', ['--future-option=x', 'img'], ['--future-option=x', '-v', '/a:/b', 'img']],
    ['boolean options with a value', ['--rm=false', '--init', 'img'], ['--rm=false', '--init', '-v', '/a:/b', 'img']],
    ['the -- before the image', ['--rm', '--', 'img', '-v', 'x'], ['--rm', '-v', '/a:/b', '--', 'img', '-v', 'x']],
    ['options only: the plan goes last', ['--rm'], ['--rm', '-v', '/a:/b']],
    ['the command\'s own options are not run options', ['img', 'sh', '-c', '-v /c:/b'], ['-v', '/a:/b', 'img', 'sh', '-c', '-v /c:/b']],
  ])('%s', (_name, runArgs, expected) => {
    const result = applyPlan(runArgs, plan(['-v', '/a:/b']));
    expect(result.args).toEqual(expected);
    expect(result.skipped).toEqual([]);
  });

  it.each([
    ['an unknown long option', ['--frobnicate', 'x', 'img'], 'unknown run option --frobnicate: sandboxd cannot tell whether it takes a value, so it cannot tell where the image starts'],
    ['an unknown short option', ['-Zt', 'img'], 'unknown run option -Z (in -Zt)'],
    ['a value option at the end', ['--rm', '--user'], 'run option --user needs a value'],
    ['a short value option at the end', ['-v'], 'run option -v needs a value'],
  ])('refuses to guess with RUN_ARGS_UNPARSABLE: %s', (_name, runArgs, message) => {
    let thrown: unknown = null;
    try {
      applyPlan(runArgs, plan([]));
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(SandboxdError);
    expect(thrown).toMatchObject({ code: 'RUN_ARGS_UNPARSABLE', message });
  });

  it('says where the plan\'s arguments went: splicing them into the caller\'s own array gives the same list', () => {
    const caller = ['run', '--rm', '-e', 'TERM=x', 'img', 'sh'];
    const result = applyPlan(caller, plan(['-e', 'TERM=y', '-v', '/a:/b', '--label', 'l=1']));
    expect(result.inserted).toEqual({ at: 4, added: ['-v', '/a:/b', '--label', 'l=1'] });
    const inPlace = [...caller];
    inPlace.splice(result.inserted.at, 0, ...result.inserted.added);
    expect(inPlace).toEqual(result.args);
  });

  it('refuses a plan whose args are not all options', () => {
    expect(() => applyPlan(['img'], plan(['-v', '/a:/b', 'stray']))).toThrow(/not all options: stray/);
  });
});

describe('applyPlan: the caller\'s mounts win, a destination appears once', () => {
  it.each([
    ['-v', ['-v', '/mine:/b']],
    ['--volume with options', ['--volume', '/mine:/b:ro,z']],
    ['--volume=', ['--volume=/mine:/b']],
    ['-v attached', ['-v/mine:/b']],
    ['an anonymous volume', ['-v', '/b']],
    ['a named volume', ['-v', 'data:/b']],
    ['--mount dst=', ['--mount', 'type=bind,src=/mine,dst=/b']],
    ['--mount=… target= readonly', ['--mount=type=bind,source=/mine,target=/b,readonly']],
    ['--mount destination= quoted', ['--mount', 'type=bind,"source=/a,b","destination=/b"']],
    ['--tmpfs', ['--tmpfs', '/b:rw,size=64m']],
    ['a trailing slash', ['-v', '/mine:/b/']],
  ])('%s', (_name, callerMount) => {
    const result = applyPlan(['--rm', ...callerMount, 'img'], plan(['-v', '/a:/b:ro,z', '-v', '/c:/d']));
    expect(result.args).toEqual(['--rm', ...callerMount, '-v', '/c:/d', 'img']);
    expect(result.skipped).toEqual([{ kind: 'mount', key: '/b', args: ['-v', '/a:/b:ro,z'], reason: 'the caller mounts /b already' }]);
  });

  it('understands the plan\'s --mount form (paths with ":") too', () => {
    const planned = plan(['--mount', 'type=bind,src=/a:b,dst=/c:d,ro', '--mount', 'type=bind,src=/e,dst=/f']);
    const result = applyPlan(['-v', '/x:/f', 'img'], planned);
    expect(result.args).toEqual(['-v', '/x:/f', '--mount', 'type=bind,src=/a:b,dst=/c:d,ro', 'img']);
    expect(result.skipped).toMatchObject([{ kind: 'mount', key: '/f' }]);
    // `-v /x:/c:d` is `/x` on `/c` with the option `d`: another destination than the plan's `/c:d`.
    expect(applyPlan(['-v', '/x:/c:d', 'img'], planned).skipped).toEqual([]);
    expect(applyPlan(['--mount', 'type=bind,src=/x,dst=/c:d', 'img'], planned).skipped).toMatchObject([{ kind: 'mount', key: '/c:d' }]);
  });

  it('names a destination by its normal form, however it is spelled', () => {
    const spellings = ['/b', '/b/', '//b', '/b//', '/./b', '/b/.', '/x/../b', '/b/c/..', '/b/./', 'b', './b', 'b/', '/.b', '/..b', '/b..', '/', '//', '/..', '/.'];
    for (const spelling of spellings) {
      const expected = path.posix.normalize(spelling).replace(/(.)\/$/, '$1');
      expect({ spelling, targets: destinations(['-v', `/h:${spelling}`, '--tmpfs', spelling]) }).toEqual({ spelling, targets: [expected, expected] });
    }
  });

  it('keeps the first of two plan mounts on one destination', () => {
    const result = applyPlan(['img'], plan(['-v', '/a:/b', '-v', '/c:/b']));
    expect(result.args).toEqual(['-v', '/a:/b', 'img']);
    expect(result.skipped).toEqual([{ kind: 'mount', key: '/b', args: ['-v', '/c:/b'], reason: 'the plan mounts /b already' }]);
  });
});

describe('applyPlan: env and flags', () => {
  it.each([
    ['-e NAME=value', ['-e', 'SSH_AUTH_SOCK=/ssh-agent']],
    ['-e NAME (from the engine\'s env)', ['-e', 'SSH_AUTH_SOCK']],
    ['--env=NAME=value', ['--env=SSH_AUTH_SOCK=/x']],
    ['--env NAME=value', ['--env', 'SSH_AUTH_SOCK=/x']],
    ['-eNAME=value', ['-eSSH_AUTH_SOCK=/x']],
  ])('a variable the caller sets is reported and not repeated: %s', (_name, callerEnv) => {
    const result = applyPlan([...callerEnv, 'img'], plan(['-e', 'SSH_AUTH_SOCK=/run/sandboxd/ssh/agent.sock', '-e', 'A=1']));
    expect(result.args).toEqual([...callerEnv, '-e', 'A=1', 'img']);
    expect(result.skipped).toEqual([{ kind: 'env', key: 'SSH_AUTH_SOCK', args: ['-e', 'SSH_AUTH_SOCK=/run/sandboxd/ssh/agent.sock'], reason: 'the caller sets SSH_AUTH_SOCK already' }]);
  });

  it('returns the spawn env of the by-name variables it kept, and the global args', () => {
    const result = applyPlan(['run', 'img'], plan(['-e', 'TOKEN', '-e', 'OTHER'], { TOKEN: 's3cret', OTHER: 'x' }, ['--connection', 'm']));
    expect(result.args).toEqual(['run', '-e', 'TOKEN', '-e', 'OTHER', 'img']);
    expect(result.spawnEnv).toEqual({ TOKEN: 's3cret', OTHER: 'x' });
    expect(result.globalArgs).toEqual(['--connection', 'm']);
    const callerWins = applyPlan(['-e', 'TOKEN=mine', 'img'], plan(['-e', 'TOKEN'], { TOKEN: 's3cret' }));
    expect(callerWins.spawnEnv).toEqual({});
    expect(callerWins.args).toEqual(['-e', 'TOKEN=mine', 'img']);
  });

  it.each([
    ['the same repeatable flag and value', ['--security-opt', 'label=disable'], ['--security-opt', 'label=disable'], 'the run arguments have --security-opt label=disable already'],
    ['the same flag written with =', ['--security-opt=label=disable'], ['--security-opt', 'label=disable'], 'the run arguments have --security-opt label=disable already'],
    ['a single-valued option', ['--workdir', '/mine'], ['--workdir', '/w'], 'the run arguments have --workdir already'],
    ['a single-valued short option', ['-w', '/mine'], ['--workdir', '/w'], 'the run arguments have --workdir already'],
    ['a boolean flag', ['--init'], ['--init'], 'the run arguments have --init already'],
    ['an old spelling', ['--net', 'none'], ['--network', 'host'], 'the run arguments have --network already'],
  ])('a flag is not repeated: %s', (_name, callerFlag, planFlag, reason) => {
    const result = applyPlan([...callerFlag, 'img'], plan(planFlag));
    expect(result.args).toEqual([...callerFlag, 'img']);
    expect(result.skipped).toEqual([{ kind: 'flag', key: planFlag[0]?.replace(/^--/, ''), args: planFlag, reason }]);
  });

  it.each([
    ['--userns', ['--userns', 'keep-id']],
    ['--userns=', ['--userns=host']],
    ['--uidmap', ['--uidmap', '0:1:1000']],
    ['--gidmap', ['--gidmap=0:1:1000']],
    ['--subuidname', ['--subuidname', 'me']],
  ])('a user namespace the caller chose (%s) wins over the plan\'s keep-id mapping: podman refuses both', (_name, callerFlags) => {
    const result = applyPlan([...callerFlags, 'img'], plan(['--userns=keep-id:uid=1000,gid=1000']));
    expect(result.args).toEqual([...callerFlags, 'img']);
    expect(result.skipped).toMatchObject([{ kind: 'flag', args: ['--userns=keep-id:uid=1000,gid=1000'] }]);
  });

  it('adds the plan\'s user namespace where the caller chose none', () => {
    expect(applyPlan(['--user', '1000', 'img'], plan(['--userns=keep-id:uid=1000,gid=1000'])).args).toEqual(['--user', '1000', '--userns=keep-id:uid=1000,gid=1000', 'img']);
  });

  it('adds a repeatable flag with another value', () => {
    const result = applyPlan(['--security-opt', 'no-new-privileges', 'img'], plan(['--security-opt', 'label=disable']));
    expect(result.args).toEqual(['--security-opt', 'no-new-privileges', '--security-opt', 'label=disable', 'img']);
  });
});

describe('applyPlan with the argument list llxprt builds (../shared/llxprt.md)', () => {
  const home = '/home/me';
  const cwd = '/home/me/src/project';
  const tmp = '/tmp';
  const git = ['.gitconfig', '.config/git/config', '.gitignore_global', '.ssh/known_hosts'];
  const llxprt = [
    'run', '-i', '--rm', '--init', '--workdir', cwd,
    '--cap-drop=ALL', '--security-opt', 'no-new-privileges',
    '--cpus', '2', '--memory', '4g', '--pids-limit', '512', '--network', 'none',
    '--volume', `${cwd}:${cwd}`,
    '--volume', `${home}/.llxprt:${home}/.llxprt:z`,
    ...git.flatMap((file) => ['--volume', `${home}/${file}:${home}/${file}:ro`, '--volume', `${home}/${file}:/home/node/${file}:ro`]),
    '--volume', `${tmp}:${tmp}`,
    '--env', 'GIT_DISCOVERY_ACROSS_FILESYSTEM=1', '--env', 'TERM=xterm-256color', '--env', 'COLORTERM=truecolor',
    '--env', 'SANDBOX=llxprt-sandbox',
    '--user', '1000', '-e', 'HOME=/home/node',
    'ghcr.io/vybestack/llxprt-code/sandbox:0.9', 'llxprt', '--prompt', 'hi',
  ];
  // What sandboxd answers for that session on Linux podman (agent relay, credential proxy, git).
  const sandboxd = plan([
    '-v', '/run/user/1000/sandboxd/agents/ab12:/run/sandboxd/ssh:z',
    '-v', '/run/user/1000/sandboxd/agents/cd34:/run/sandboxd/sockets/credential-proxy:z',
    '-v', `${home}/.gitconfig:${home}/.gitconfig:ro,z`,
    '-v', `${home}/.gitconfig:/home/node/.gitconfig:ro,z`,
    '-v', `${home}/.config/git/config:/home/node/.config/git/config:ro,z`,
    '-v', `${home}/.config/git/ignore:/home/node/.config/git/ignore:ro,z`,
    '-e', 'GIT_DISCOVERY_ACROSS_FILESYSTEM=1',
    '-e', 'LLXPRT_CREDENTIAL_SOCKET=/run/sandboxd/sockets/credential-proxy/agent.sock',
    '-e', 'SSH_AUTH_SOCK=/run/sandboxd/ssh/agent.sock',
    '-e', 'TERM=xterm-256color',
    '--security-opt', 'label=disable',
  ]);

  it('keeps every llxprt argument, adds only what is new, before the image, with no duplicate destination', () => {
    const result = applyPlan(llxprt, sandboxd);
    const image = llxprt.indexOf('ghcr.io/vybestack/llxprt-code/sandbox:0.9');
    expect(result.args.slice(0, image)).toEqual(llxprt.slice(0, image));
    expect(result.args.slice(image)).toEqual([
      '-v', '/run/user/1000/sandboxd/agents/ab12:/run/sandboxd/ssh:z',
      '-v', '/run/user/1000/sandboxd/agents/cd34:/run/sandboxd/sockets/credential-proxy:z',
      '-v', `${home}/.config/git/ignore:/home/node/.config/git/ignore:ro,z`,
      '-e', 'LLXPRT_CREDENTIAL_SOCKET=/run/sandboxd/sockets/credential-proxy/agent.sock',
      '-e', 'SSH_AUTH_SOCK=/run/sandboxd/ssh/agent.sock',
      '--security-opt', 'label=disable',
      ...llxprt.slice(image),
    ]);
    expect(result.skipped.map(({ kind, key }) => `${kind} ${key}`)).toEqual([
      `mount ${home}/.gitconfig`,
      'mount /home/node/.gitconfig',
      'mount /home/node/.config/git/config',
      'env GIT_DISCOVERY_ACROSS_FILESYSTEM',
      'env TERM',
    ]);
    const targets = destinations(result.args);
    expect(new Set(targets).size).toBe(targets.length);
  });
});
