import { chmodSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { acquireSession, applyPlan, type AcquireOptions } from '../../dist/client/index.js';
import { CREDENTIAL_BURST } from '../../dist/daemon/credentials/credential-server.js';
import { CLI, Cleanup, cliEnv, makeSandbox, type Sandbox } from '../helpers.js';
import { startHttpsGit, type HttpsGit } from '../lab/https-git.js';
import { startPodmanMachine } from '../lab/podman-machine.js';
import { dockerLabUnavailable, startDockerd, type Dockerd } from '../lab/dockerd.js';
import { lab, labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterAll(() => cleanup.run(), 120_000);

const USER = 'lab';
const TOKEN = `tok-${randomBytes(12).toString('hex')}`;
/** The user's tokens for other origins, which no request of these sessions may reach. */
const OTHER = `other-${randomBytes(12).toString('hex')}`;
const SOCKET = '/run/sandboxd/git-credential/agent.sock';
const dockerUnavailable = dockerLabUnavailable(lab);

/**
 * The user's host, as a person with an HTTPS remote has it: git's `store` helper holding the token
 * in ~/.git-credentials, and the self-signed certificate of their server trusted by http.sslCAInfo.
 * A real git server on loopback (git http-backend behind basic auth); containers reach it on the
 * host's network. GIT_SSL_CAINFO (set on this machine) is left out of every environment: it would
 * override the user's own sslCAInfo.
 */
describe.skipIf(labMissing)('HTTPS credentials from the host\'s helpers, get only (real git server, podman, git store)', () => {
  let sandbox: Sandbox;
  let server: HttpsGit;
  let env: NodeJS.ProcessEnv;
  let image: string;
  let credentialsFile: string;
  let storeBefore: string;

  /** The environment without GIT_SSL_CAINFO, which would override the user's own http.sslCAInfo. */
  function withoutCaInfo(from: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
    const copy = { ...from };
    delete copy.GIT_SSL_CAINFO;
    return copy;
  }

  function hostGit(...args: string[]) {
    return execa('git', args, { env: { ...withoutCaInfo(process.env), HOME: sandbox.home, XDG_CONFIG_HOME: '', GIT_TERMINAL_PROMPT: '0' }, extendEnv: false, reject: false });
  }

  beforeAll(async () => {
    const lab = podmanLab();
    image = lab.image;
    sandbox = makeSandbox(cleanup);
    server = await startHttpsGit(path.join(sandbox.dir, 'https'), USER, TOKEN);
    cleanup.add(() => server.close());
    writeFileSync(
      path.join(sandbox.home, '.gitconfig'),
      ['[credential]', '\thelper = store', '[http]', `\tsslCAInfo = ${server.caFile}`, '[user]', '\tname = Lab', '\temail = lab@example.com', '[init]', '\tdefaultBranch = main', ''].join('\n'),
    );
    credentialsFile = path.join(sandbox.home, '.git-credentials');
    const others = [`127.0.0.1:${String(server.port + 1)}`, '127.0.0.1', 'git.example.com:8443', `${server.host}.evil.example`];
    writeFileSync(credentialsFile, [`https://${USER}:${TOKEN}@${server.host}`, ...others.map((host) => `https://${USER}:${OTHER}@${host}`), ''].join('\n'));
    chmodSync(credentialsFile, 0o600);
    const bare = path.join(server.root, 'project.git');
    await hostGit('init', '-q', '--bare', '-b', 'main', bare);
    const seed = path.join(sandbox.dir, 'seed');
    mkdirSync(seed);
    await hostGit('-C', seed, 'init', '-q', '-b', 'main');
    await hostGit('-C', seed, 'commit', '-q', '--allow-empty', '-m', 'seed');
    await hostGit('-C', seed, 'push', '-q', bare, 'main');
    // The server and the user's helper work on the host, as the user's own git sees them.
    const listed = await hostGit('ls-remote', server.url('project'));
    expect(listed.stderr).toBe('');
    expect(listed.stdout).toContain('refs/heads/main');
    // As the host's git left it (its `store` wrote the entry again after that success).
    storeBefore = readFileSync(credentialsFile, 'utf8');
    env = withoutCaInfo(cliEnv(sandbox, lab.env));
  });

  async function session(options: Partial<AcquireOptions>, sessionEnv: NodeJS.ProcessEnv = env) {
    const acquired = await acquireSession({ engine: 'podman', env: sessionEnv, heartbeat: false, cwd: sandbox.dir, ...options });
    cleanup.add(() => acquired.release());
    return acquired;
  }

  function inContainer(plan: Parameters<typeof applyPlan>[1], script: string, user: string[] = [], runEnv: NodeJS.ProcessEnv = env, runImage = image, engine = 'podman') {
    const applied = applyPlan(['run', '--rm', '--network', 'host', ...user, runImage, 'sh', '-c', script], plan);
    return execa(engine, [...applied.globalArgs, ...applied.args], { env: { ...runEnv, ...applied.spawnEnv }, extendEnv: false, reject: false, timeout: 90_000 });
  }

  function pushScript(branch: string): string {
    return [
      'set -e',
      'export GIT_TERMINAL_PROMPT=0',
      'cd /tmp',
      `git clone -q ${server.url('project')} c`,
      'cd c',
      `git -c user.name=Agent -c user.email=agent@example.com commit -q --allow-empty -m ${branch}`,
      `git push -q origin HEAD:refs/heads/${branch}`,
      'echo pushed',
    ].join('\n');
  }

  async function serverRefs(): Promise<string> {
    return (await hostGit('--git-dir', path.join(server.root, 'project.git'), 'for-each-ref', '--format=%(refname)')).stdout;
  }

  /** A credential request as git's credential-cache helper sends it, straight to the session's socket. */
  function ask(lines: string[]): string {
    return `printf '${lines.join('\\n')}\\n' | git credential-cache --socket ${SOCKET} get; echo "rc=$?"`;
  }

  type Opened = Awaited<ReturnType<typeof session>>;

  /** A session with the host named pushes a branch `<prefix>-root` as root, then `<prefix>-user` as --user 1000. */
  async function pushesAsRootAndUser(open: (options: Partial<AcquireOptions>) => Promise<Opened>, run: (plan: Opened['plan'], script: string, user: string[]) => ReturnType<typeof inContainer>, prefix: string): Promise<Opened[]> {
    const opened: Opened[] = [];
    for (const [who, user] of [['root', null], ['user', { uid: 1000, gid: 1000 }]] as const) {
      const named = await open({ gitCredentials: [server.host], ...(user === null ? {} : { containerUser: user }) });
      expect(named.gitCredentials).toEqual({ status: 'served', hosts: [server.host], bridge: 'mount', socket: SOCKET });
      expect(named.info.gitCredentials).toEqual([server.host]);
      const pushed = await run(named.plan, pushScript(`${prefix}-${who}`), user === null ? [] : ['--user', '1000:1000']);
      expect(pushed.stderr).toBe('');
      expect(pushed.stdout).toBe('pushed');
      expect(await serverRefs()).toContain(`refs/heads/${prefix}-${who}`);
      opened.push(named);
    }
    return opened;
  }

  it('pushes over HTTPS as root and as --user 1000 with the host named: the token comes from the host\'s store helper', async () => {
    const [root] = await pushesAsRootAndUser((options) => session(options), inContainer, 'from');
    if (root === undefined) throw new Error('no session');
    // `sessions ls` names the hosts; the log names session, host and username, never the token.
    const listed = await execa(process.execPath, [CLI, 'sessions', 'ls', '--json'], { env, extendEnv: false, reject: false });
    expect(listed.stdout).toContain(`"gitCredentials": [\n      "${server.host}"\n    ]`);
    const table = await execa(process.execPath, [CLI, 'sessions', 'ls', '--no-trunc'], { env, extendEnv: false, reject: false });
    expect(table.stdout).toContain('GIT CREDENTIALS');
    expect(table.stdout.split('\n').find((line) => line.startsWith(root.id))).toContain(server.host);
    const log = readFileSync(path.join(sandbox.env.SANDBOXD_LOG_DIR, 'sandboxd.log'), 'utf8');
    expect(log).not.toContain(TOKEN);
    const answered = log.split('\n').filter((line) => line.includes('credential answered')).map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(answered).toEqual(expect.arrayContaining([expect.objectContaining({ sessionId: root.id, host: server.host, username: USER, outcome: 'answered' })]));
    expect(readFileSync(credentialsFile, 'utf8')).toBe(storeBefore);
  });

  it('without the option nothing: the token is in no variable, mount or file of the container, and git cannot authenticate', async () => {
    const plain = await session({});
    expect(plain.gitCredentials).toBeNull();
    expect(plain.info.gitCredentials).toEqual([]);
    expect(JSON.stringify(plain.plan)).not.toContain(TOKEN);
    const script = [
      `GIT_TERMINAL_PROMPT=0 git ls-remote ${server.url('project')} >/dev/null 2>&1; echo "ls-remote=$?"`,
      'env',
      'cat /proc/self/mountinfo',
      // Every file the container can read outside the kernel's own trees, by name only.
      `grep -rl "${TOKEN.slice(0, 4)}""${TOKEN.slice(4)}" /bin /etc /home /root /run /tmp /usr 2>/dev/null; echo end`,
    ].join('\n');
    const result = await inContainer(plain.plan, script);
    expect(result.stdout).toContain('ls-remote=128');
    expect(result.stdout).not.toContain(TOKEN);
    expect(result.stdout).not.toContain(OTHER);
    expect(result.stdout).not.toContain('git-credential');
    expect(result.stdout.trimEnd().endsWith('end')).toBe(true);
    expect(result.stdout.split('\n').filter((line) => line.startsWith('/'))).toEqual([]);
  });

  it('another host named: nothing for this one, neither through git nor asked straight on the socket', async () => {
    const other = await session({ gitCredentials: ['git.example.com:8443'] });
    expect(other.gitCredentials).toMatchObject({ status: 'served', hosts: ['git.example.com:8443'] });
    const result = await inContainer(other.plan, [`GIT_TERMINAL_PROMPT=0 git ls-remote ${server.url('project')} >/dev/null 2>&1; echo "ls-remote=$?"`, ask(['protocol=https', `host=${server.host}`])].join('\n'));
    expect(result.stdout).toBe('ls-remote=128\nrc=0');
  });

  it('only protocol https and exactly the named host and port are answered; prefixes, other ports and other schemes get nothing', async () => {
    const named = await session({ gitCredentials: [server.host] });
    const requests = [
      ['protocol=https', `host=${server.host}`],
      ['protocol=https', `host=127.0.0.1:${String(server.port + 1)}`],
      ['protocol=https', 'host=127.0.0.1'],
      ['protocol=http', `host=${server.host}`],
      ['protocol=https', `host=${server.host}.evil.example`],
      ['protocol=https', `host=evil.example@${server.host}`],
      ['protocol=https', `host=${server.host}`, `host=evil.example`],
    ];
    // The user's store holds tokens for the other ports and hosts too: only the match keeps them out.
    const result = await inContainer(named.plan, requests.map((lines) => `${ask(lines)}; echo ---`).join('\n'));
    expect(result.stdout).not.toContain(OTHER);
    const answers = result.stdout.split('---').map((answer) => answer.trim()).filter((answer) => answer !== '');
    expect(answers[0]).toBe(`username=${USER}\npassword=${TOKEN}\nrc=0`);
    expect(answers.slice(1, requests.length)).toEqual(requests.slice(1).map(() => 'rc=0'));
  });

  /** git's approve and reject, then store and erase sent straight to the socket, then a fill. */
  function storeAndEraseScript(): string {
    const cache = (action: string, password: string) =>
      `printf 'protocol=https\\nhost=${server.host}\\nusername=${USER}\\npassword=${password}\\n' | git credential-cache --socket ${SOCKET} ${action}`;
    return [
      `printf 'protocol=https\\nhost=${server.host}\\nusername=${USER}\\npassword=planted\\n' | git credential approve`,
      `printf 'protocol=https\\nhost=${server.host}\\nusername=${USER}\\npassword=${TOKEN}\\n' | git credential reject`,
      cache('store', 'planted'),
      cache('erase', TOKEN),
      `printf 'protocol=https\\nhost=${server.host}\\n' | git credential fill`,
    ].join('\n');
  }

  it('git credential approve and reject in the container, and store and erase sent straight to the socket, never change the host\'s store', async () => {
    const named = await session({ gitCredentials: [server.host] });
    const result = await inContainer(named.plan, storeAndEraseScript());
    expect(result.stdout).toBe(`protocol=https\nhost=${server.host}\nusername=${USER}\npassword=${TOKEN}`);
    expect(readFileSync(credentialsFile, 'utf8')).toBe(storeBefore);
  });

  it(`a session asking faster than its rate is refused past ${String(CREDENTIAL_BURST)} at once`, async () => {
    const named = await session({ gitCredentials: [server.host] });
    const script = `i=0; while test $i -lt 30; do ${ask(['protocol=https', `host=${server.host}`])}; i=$((i+1)); done`;
    const result = await inContainer(named.plan, script);
    const answered = result.stdout.split('\n').filter((line) => line === `password=${TOKEN}`).length;
    expect(answered).toBeGreaterThanOrEqual(CREDENTIAL_BURST);
    expect(answered).toBeLessThan(30);
    const log = readFileSync(path.join(sandbox.env.SANDBOXD_LOG_DIR, 'sandboxd.log'), 'utf8');
    expect(log).toContain(`"sessionId":"${named.id}","host":"${server.host}","outcome":"refused"`);
  });

  /**
   * A real Docker Engine on this host (dockerd with its own roots, no iptables, no bridge): its
   * bind mounts are host paths, so each session's socket comes from the local relay, as Podman's.
   */
  describe.skipIf(dockerUnavailable !== null && process.env.CI === undefined)('a Docker Engine on this host', () => {
    let dockerd: Dockerd;
    let dockerEnv: NodeJS.ProcessEnv;

    beforeAll(async () => {
      if (dockerUnavailable !== null) throw new Error(`the docker lab is not available: ${dockerUnavailable}`);
      dockerd = await startDockerd('credentials', lab, cleanup);
      dockerEnv = { ...env, DOCKER_HOST: dockerd.host };
    }, 180_000);

    const dockerSession = (options: Partial<AcquireOptions>) => session({ engine: 'docker', ...options }, dockerEnv);
    const inDocker = (plan: Parameters<typeof applyPlan>[1], script: string, user: string[] = []) => inContainer(plan, script, user, dockerEnv, dockerd.image, 'docker');

    it('pushes over HTTPS as root and as --user 1000 through the session\'s own socket on the local relay', async () => {
      const [, user] = await pushesAsRootAndUser(dockerSession, inDocker, 'docker');
      if (user === undefined) throw new Error('no session');
      const log = readFileSync(path.join(sandbox.env.SANDBOXD_LOG_DIR, 'sandboxd.log'), 'utf8');
      expect(log).not.toContain(TOKEN);
      const answered = log.split('\n').filter((line) => line.includes('credential answered')).map((line) => JSON.parse(line) as Record<string, unknown>);
      expect(answered).toEqual(expect.arrayContaining([expect.objectContaining({ sessionId: user.id, host: server.host, username: USER, outcome: 'answered' })]));
    });

    it('a host not named gets nothing, through git or asked straight on the socket; without the option there is no socket', async () => {
      const other = await dockerSession({ gitCredentials: ['git.example.com:8443'] });
      expect(other.gitCredentials).toMatchObject({ status: 'served', bridge: 'mount', hosts: ['git.example.com:8443'] });
      const result = await inDocker(other.plan, [`GIT_TERMINAL_PROMPT=0 git ls-remote ${server.url('project')} >/dev/null 2>&1; echo "ls-remote=$?"`, ask(['protocol=https', `host=${server.host}`])].join('\n'));
      expect(result.stdout).toBe('ls-remote=128\nrc=0');
      const plain = await dockerSession({});
      expect(plain.gitCredentials).toBeNull();
      const bare = await inDocker(plain.plan, [`GIT_TERMINAL_PROMPT=0 git ls-remote ${server.url('project')} >/dev/null 2>&1; echo "ls-remote=$?"`, `test -e ${SOCKET}; echo "socket=$?"`, 'env'].join('\n'));
      expect(bare.stdout.split('\n').slice(0, 2)).toEqual(['ls-remote=128', 'socket=1']);
      expect(bare.stdout).not.toContain(TOKEN);
      expect(bare.stdout).not.toContain('GIT_CONFIG_COUNT');
    });

    it('root in the container can neither replace its credential socket nor plant a file beside it: the mount is read-only', async () => {
      const named = await dockerSession({ gitCredentials: [server.host] });
      const dir = path.posix.dirname(SOCKET);
      const script = [`rm -f ${SOCKET} 2>/dev/null; echo "rm=$?"`, `(: > ${dir}/planted) 2>/dev/null; echo "plant=$?"`, `test -S ${SOCKET}; echo "socket=$?"`, ask(['protocol=https', `host=${server.host}`])].join('\n');
      const result = await inDocker(named.plan, script);
      expect(result.stdout).toBe(`rm=1\nplant=1\nsocket=0\nusername=${USER}\npassword=${TOKEN}\nrc=0`);
      const source = named.plan.mounts.find((mount) => mount.target === dir)?.source ?? '';
      expect(readdirSync(source)).toEqual(['agent.sock']);
    });

    it('approve, reject, store and erase in the container never change the host\'s store', async () => {
      const named = await dockerSession({ gitCredentials: [server.host], containerUser: { uid: 1000, gid: 1000 } });
      const result = await inDocker(named.plan, storeAndEraseScript(), ['--user', '1000:1000']);
      expect(result.stdout).toBe(`protocol=https\nhost=${server.host}\nusername=${USER}\npassword=${TOKEN}`);
      expect(readFileSync(credentialsFile, 'utf8')).toBe(storeBefore);
    });
  });

  it('Podman machine: the session\'s credential socket comes through the tunnel, and a push works as --user 1000', async () => {
    const conf = await startPodmanMachine(sandbox, podmanLab().env, cleanup);
    const machineEnv = { ...env, CONTAINERS_CONF: conf };
    const tunnelled = await session({ gitCredentials: [server.host], sshBridge: 'tunnel', containerUser: { uid: 1000, gid: 1000 } }, machineEnv);
    expect(tunnelled.gitCredentials).toMatchObject({ status: 'served', bridge: 'tunnel', socket: SOCKET });
    const result = await inContainer(tunnelled.plan, pushScript('through-tunnel'), ['--user', '1000:1000'], machineEnv);
    expect(result.stderr).toBe('');
    expect(result.stdout).toBe('pushed');
    expect(await serverRefs()).toContain('refs/heads/through-tunnel');
  });
});
