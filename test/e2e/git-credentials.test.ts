import { spawn } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { acquireSession, applyPlan, listSessions, type AcquireOptions } from '../../dist/client/index.js';
import { CREDENTIAL_BURST } from '../../dist/daemon/credentials/credential-server.js';
import { CLI, Cleanup, cli, cliEnv, daemonPid, makeSandbox, pidAlive, waitFor, type Sandbox } from '../helpers.js';
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
  /**
   * A running container whose session has `--git-credentials`, across a daemon restart: the new
   * daemon serves the recorded credential socket again and answers the hosts its session named
   * until the client renews (DESIGN §9, kept endpoints). The client here is a separate process
   * that holds the lease and stops its heartbeats before the restart, so it never renews: every
   * answer after the restart is the kept socket's, and killing it is a client that ended; one
   * client heartbeats as `run` does, and its renewal takes the socket over.
   */
  describe('across a daemon restart: the recorded credential socket answers until the client renews', () => {
    type Restart = 'kill -9' | 'sandboxd restart';

    /** A sandbox of its own (its own daemon), with the same user's git config and store. */
    async function restartSandbox(engineEnv: (own: Sandbox) => Promise<Record<string, string>>) {
      const own = makeSandbox(cleanup);
      copyFileSync(path.join(sandbox.home, '.gitconfig'), path.join(own.home, '.gitconfig'));
      copyFileSync(credentialsFile, path.join(own.home, '.git-credentials'));
      chmodSync(path.join(own.home, '.git-credentials'), 0o600);
      return { own, ownEnv: withoutCaInfo(cliEnv(own, { ...podmanLab().env, ...(await engineEnv(own)) })) };
    }

    /** The client: acquires with the host named, heartbeats every second until SIGUSR1, never renews. */
    async function holder(ownEnv: NodeJS.ProcessEnv, options: Partial<AcquireOptions>) {
      const client = new URL('../../dist/client/index.js', import.meta.url).pathname;
      const child = spawn(process.execPath, ['--input-type=module', '-e', `
        const http = await import('node:http');
        const { acquireSession } = await import(${JSON.stringify(client)});
        const held = await acquireSession({ engine: 'podman', sshAgent: 'off', heartbeat: false, cwd: ${JSON.stringify(sandbox.dir)}, ...${JSON.stringify(options)} });
        const socketPath = process.env.SANDBOXD_RUNTIME_DIR + '/sandboxd.sock';
        const beat = setInterval(() => {
          const request = http.request({ socketPath, method: 'POST', path: '/v1/sessions/' + held.id + '/heartbeat' }, (response) => response.resume());
          request.on('error', () => undefined);
          request.end();
        }, 1000);
        process.on('SIGUSR1', () => { clearInterval(beat); console.log('quiet'); });
        console.log(JSON.stringify({ id: held.id, plan: held.plan, gitCredentials: held.gitCredentials }));
        setInterval(() => undefined, 60000);
      `], { env: ownEnv, stdio: ['ignore', 'pipe', 'inherit'] });
      cleanup.add(() => child.kill('SIGKILL'));
      let out = '';
      child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
      const line = await waitFor(() => out.split('\n').find((text) => text.startsWith('{')), 'the client to hold its session', 60_000);
      const held = JSON.parse(line) as { id: string; plan: Opened['plan']; gitCredentials: Opened['gitCredentials'] };
      return { child, ...held, quiet: () => waitFor(() => (child.kill('SIGUSR1'), out.includes('quiet')), 'the client to stop its heartbeats', 10_000, 200) };
    }

    function logOf(own: Sandbox): string {
      const dir = own.env.SANDBOXD_LOG_DIR;
      return readdirSync(dir).map((name) => readFileSync(path.join(dir, name), 'utf8')).join('\n');
    }

    function logLines(own: Sandbox, message: string): Record<string, unknown>[] {
      return logOf(own).split('\n').filter((line) => line.includes(message)).map((line) => JSON.parse(line) as Record<string, unknown>);
    }

    async function restart(own: Sandbox, ownEnv: NodeJS.ProcessEnv, how: Restart, sessionId: string): Promise<void> {
      if (how === 'kill -9') {
        // What a kill -9 keeps is what was recorded a moment before it: wait for that record.
        const record = path.join(own.env.SANDBOXD_STATE_DIR, 'endpoints.json');
        await waitFor(() => existsSync(record) && readFileSync(record, 'utf8').includes(sessionId), 'the session\'s sockets to be recorded');
        const pid = daemonPid(own.env);
        if (pid === null) throw new Error('no daemon to kill');
        process.kill(pid, 'SIGKILL');
        await waitFor(() => !pidAlive(pid), 'the daemon to die');
        expect((await cli(['start'], ownEnv)).exitCode).toBe(0);
      } else {
        expect((await cli(['restart'], ownEnv)).exitCode).toBe(0);
      }
      await waitFor(() => logOf(own).includes('serving the sockets of the previous daemon'), 'the new daemon to serve the recorded sockets', 30_000, 100);
    }

    /** A container that keeps running: what the agent's code is, started from the session's plan. */
    async function running(plan: Opened['plan'], ownEnv: NodeJS.ProcessEnv, user: string[]) {
      const applied = applyPlan(['run', '-d', '--rm', '--network', 'host', ...user, image, 'sleep', '600'], plan);
      const spawnEnv = { ...ownEnv, ...applied.spawnEnv };
      const started = await execa('podman', [...applied.globalArgs, ...applied.args], { env: spawnEnv, extendEnv: false, reject: false, timeout: 90_000 });
      expect(started.stderr).toBe('');
      const id = started.stdout.trim();
      cleanup.add(() => execa('podman', [...applied.globalArgs, 'rm', '-f', '--time', '0', id], { env: spawnEnv, extendEnv: false, reject: false }));
      return (script: string) => execa('podman', [...applied.globalArgs, 'exec', id, 'sh', '-c', `export GIT_TERMINAL_PROMPT=0\n${script}`], { env: spawnEnv, extendEnv: false, reject: false, timeout: 90_000 });
    }

    const fill = `printf 'protocol=https\\nhost=%s\\n\\n' "$HOST" | git credential fill; echo "rc=$?"`;

    async function keptAnswers(how: Restart, user: string[], options: Partial<AcquireOptions> = {}, engineEnv: (own: Sandbox) => Promise<Record<string, string>> = () => Promise.resolve({})) {
      const { own, ownEnv } = await restartSandbox(engineEnv);
      const client = await holder(ownEnv, { gitCredentials: [server.host], ...(user.length === 0 ? {} : { containerUser: { uid: 1000, gid: 1000 } }), ...options });
      expect(client.gitCredentials).toMatchObject({ status: 'served', hosts: [server.host] });
      const exec = await running(client.plan, ownEnv, user);
      const cloned = await exec(`cd /tmp && git clone -q ${server.url('project')} c && echo cloned`);
      expect(cloned.stdout).toBe('cloned');
      await client.quiet();
      await restart(own, ownEnv, how, client.id);

      // Before any renewal: the host named gets its token, through git fill and a push.
      const branch = `kept-${how === 'kill -9' ? 'killed' : 'restarted'}-${user.length === 0 ? 'root' : 'user'}${options.sshBridge === 'tunnel' ? '-tunnel' : ''}`;
      const after = await exec([`HOST=${server.host}; ${fill}`, 'cd /tmp/c', `git -c user.name=Agent -c user.email=agent@example.com commit -q --allow-empty -m ${branch}`, `git push -q origin HEAD:refs/heads/${branch} && echo pushed`].join('\n'));
      expect(after.stderr).toBe('');
      expect(after.stdout).toBe(`protocol=https\nhost=${server.host}\nusername=${USER}\npassword=${TOKEN}\nrc=0\npushed`);
      expect(await serverRefs()).toContain(`refs/heads/${branch}`);
      // A host not named gets nothing, though the user's store holds a token for it.
      const other = await exec([ask(['protocol=https', `host=127.0.0.1:${String(server.port + 1)}`]), `HOST=127.0.0.1:${String(server.port + 1)}; ${fill}`].join('\n'));
      expect(other.stdout).not.toContain(OTHER);
      expect(other.stdout).toMatch(/^rc=0\nrc=128$/);
      // Answered as the session that named the host, by the socket the previous daemon recorded.
      expect(logLines(own, 'credential answered')).toEqual(expect.arrayContaining([expect.objectContaining({ sessionId: client.id, kept: true, host: server.host, username: USER })]));
      expect(logLines(own, 'credential request refused')).toEqual(expect.arrayContaining([expect.objectContaining({ sessionId: client.id, kept: true, outcome: 'refused' })]));
      expect(logOf(own)).not.toContain(TOKEN);
      expect(logOf(own)).not.toContain('a renewed session took its socket over');

      // The client ends before renewing: the sweep finds it gone, and from then on nothing.
      client.child.kill('SIGKILL');
      await waitFor(() => logOf(own).includes('their clients ended before renewing'), 'the sweep to find the client gone', 30_000, 100);
      // Asked where the container's mount leads (a client that ended has its container removed too,
      // so the container may be gone by now): the socket answers nothing.
      const source = client.plan.mounts.find((mount) => mount.target === path.posix.dirname(SOCKET))?.source ?? '';
      const asked = await execa('git', ['credential-cache', '--socket', path.join(source, 'agent.sock'), 'get'], { input: `protocol=https\nhost=${server.host}\n\n`, reject: false, timeout: 30_000 });
      expect({ stdout: asked.stdout, exitCode: asked.exitCode }).toEqual({ stdout: '', exitCode: 0 });
      const ended = await exec(`HOST=${server.host}; ${fill}`);
      expect(ended.stdout, ended.stderr).not.toContain(TOKEN);
      expect(readFileSync(path.join(own.home, '.git-credentials'), 'utf8')).toBe(storeBefore);
    }

    it('kill -9, then `sandboxd start`: the running container\'s git gets the token for the named host (fill, push) as root; another host nothing; a client that ended nothing', async () => {
      await keptAnswers('kill -9', []);
    });

    it('`sandboxd restart`: the same as --user 1000', async () => {
      await keptAnswers('sandboxd restart', ['--user', '1000:1000']);
    });

    it('the client renews: its renewed session takes the socket over and answers from then on, as itself', async () => {
      const { own, ownEnv } = await restartSandbox(() => Promise.resolve({}));
      const client = await holder(ownEnv, { gitCredentials: [server.host], heartbeat: true });
      const exec = await running(client.plan, ownEnv, []);
      await restart(own, ownEnv, 'sandboxd restart', client.id);
      await waitFor(() => logLines(own, 'a renewed session took its socket over').some((line) => line.name === 'git-credential'), 'the renewal to take the credential socket over', 60_000, 200);
      // The renewal takes the socket over before its session is added to the list.
      const renewed = await waitFor(async () => (await listSessions(ownEnv)).find((session) => session.id !== client.id), 'the renewed session to be listed', 30_000, 100);
      const answered = await exec(`HOST=${server.host}; ${fill}`);
      expect(answered.stdout).toBe(`protocol=https\nhost=${server.host}\nusername=${USER}\npassword=${TOKEN}\nrc=0`);
      const lines = logLines(own, 'credential answered');
      expect(lines.at(-1)).toMatchObject({ sessionId: renewed.id, host: server.host });
      expect(lines.at(-1)).not.toHaveProperty('kept');
    });

    it('Podman machine tunnel, kill -9: the same through the tunnel\'s recorded socket, as --user 1000', async () => {
      await keptAnswers('kill -9', ['--user', '1000:1000'], { sshBridge: 'tunnel' }, async (own) => ({ CONTAINERS_CONF: await startPodmanMachine(own, podmanLab().env, cleanup) }));
    });
  });
});
