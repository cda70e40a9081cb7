import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Cleanup, cli, cliEnv, makeSandbox, startAgent, startDaemon } from '../helpers.js';
import { writeContainersConf } from '../lab/sshd.js';
import { labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterAll(() => cleanup.run());

interface ErrorJson {
  error: { code: string; message: string; remedy: string };
}

describe.skipIf(labMissing)('Podman connection discovery errors (real podman CLI)', () => {
  let env: NodeJS.ProcessEnv;
  let dir: string;
  let baseConf: string;

  beforeAll(async () => {
    const { env: podmanEnv } = podmanLab();
    baseConf = podmanEnv.CONTAINERS_CONF ?? '';
    const sandbox = makeSandbox(cleanup);
    dir = sandbox.dir;
    const agent = await startAgent(sandbox.dir, cleanup);
    env = cliEnv(sandbox, { ...podmanEnv, SSH_AUTH_SOCK: agent.socket, SANDBOXD_SSH_BRIDGE: 'tunnel' });
    await startDaemon(env, cleanup);
  });

  async function planError(extra: NodeJS.ProcessEnv, args: string[] = []): Promise<ErrorJson['error']> {
    const result = await cli(['plan', '--engine', 'podman', '--json', ...args], { ...env, ...extra }, 40_000);
    expect(result.exitCode).toBe(1);
    return (JSON.parse(result.stdout) as ErrorJson).error;
  }

  function conf(name: string, connections: { name: string; uri: string }[], active?: string): string {
    return writeContainersConf(path.join(dir, `${name}.conf`), baseConf, connections, active);
  }

  it('podman not on the session PATH names the PATH searched', async () => {
    const error = await planError({ PATH: '/nonexistent:/also-not' });
    expect(error).toMatchObject({ code: 'PODMAN_NOT_FOUND', message: "podman is not on the session's PATH (searched: /nonexistent:/also-not)" });
    expect(error.remedy).toContain('Install podman');
  });

  it('no connections', async () => {
    const error = await planError({ CONTAINERS_CONF: conf('none', []) });
    expect(error).toMatchObject({ code: 'PODMAN_NO_CONNECTIONS', message: 'podman lists no system connections, so there is no machine to tunnel into' });
    expect(error.remedy).toContain('podman machine init');
  });

  it('several connections and none default lists their names', async () => {
    const error = await planError({
      CONTAINERS_CONF: conf('two', [
        { name: 'alpha', uri: 'ssh://core@127.0.0.1:1/x' },
        { name: 'beta', uri: 'ssh://core@127.0.0.1:2/x' },
      ]),
    });
    expect(error).toMatchObject({ code: 'PODMAN_NO_DEFAULT_CONNECTION', message: 'podman lists 2 connections and none is the default: alpha, beta' });
    expect(error.remedy).toBe('Run `podman system connection default <name>` (one of: alpha, beta), or set CONTAINER_CONNECTION.');
  });

  it('a named connection that does not exist, from --connection and from CONTAINER_CONNECTION', async () => {
    const one = conf('one', [{ name: 'alpha', uri: 'ssh://core@127.0.0.1:1/x' }], 'alpha');
    const fromFlag = await planError({ CONTAINERS_CONF: one }, ['--connection', 'gamma']);
    expect(fromFlag).toMatchObject({ code: 'PODMAN_CONNECTION_NOT_FOUND', message: 'the session asked for connection "gamma", which podman does not list (it lists: alpha)' });
    const fromEnv = await planError({ CONTAINERS_CONF: one, CONTAINER_CONNECTION: 'delta' });
    expect(fromEnv).toMatchObject({ code: 'PODMAN_CONNECTION_NOT_FOUND', message: 'CONTAINER_CONNECTION names connection "delta", which podman does not list (it lists: alpha)' });
  });

  it('output that does not parse', async () => {
    // Stands in for a podman whose JSON output changed shape.
    const bin = path.join(dir, 'fakebin');
    mkdirSync(bin, { recursive: true });
    writeFileSync(path.join(bin, 'podman'), '#!/bin/sh\necho "connections: none here"\n');
    chmodSync(path.join(bin, 'podman'), 0o755);
    const error = await planError({ PATH: bin });
    expect(error).toMatchObject({
      code: 'PODMAN_CONNECTIONS_UNPARSABLE',
      message: 'cannot read `podman system connection list --format json`: it is not JSON: connections: none here',
    });
  });

  it('a unix:// connection has no VM to tunnel into', async () => {
    const error = await planError({ CONTAINERS_CONF: conf('unix', [{ name: 'local', uri: 'unix:///run/podman/podman.sock' }], 'local') });
    expect(error).toMatchObject({ code: 'PODMAN_CONNECTION_UNSUPPORTED', message: 'connection local is unix:// (unix:///run/podman/podman.sock), not ssh://; there is no VM to tunnel into' });
  });

  it('an IPv6 URI without a port is dialled on [::1] port 22', async () => {
    const error = await planError({ CONTAINERS_CONF: conf('v6', [{ name: 'six', uri: 'ssh://core@[::1]/run/podman/podman.sock' }], 'six') });
    expect(error.code).toBe('TUNNEL_UNREACHABLE');
    expect(error.message).toContain('connect to host ::1 port 22');
  });

  it('PODMAN_CONNECTIONS_CONF is the session\'s, reaches podman, and the daemon\'s own never leaks', async () => {
    // podman 4 in the lab predates podman-connections.json: a stand-in prints the rows of the file
    // the variable names, or none without it.
    const bin = path.join(dir, 'connbin');
    mkdirSync(bin, { recursive: true });
    writeFileSync(path.join(bin, 'podman'), '#!/bin/sh\nif [ -n "$PODMAN_CONNECTIONS_CONF" ]; then cat "$PODMAN_CONNECTIONS_CONF"; else echo "[]"; fi\n');
    chmodSync(path.join(bin, 'podman'), 0o755);
    const rows = (name: string) => JSON.stringify([{ Name: name, URI: `unix:///run/${name}.sock`, Identity: '', Default: true }]);
    const sessionFile = path.join(dir, 'session-connections.json');
    writeFileSync(sessionFile, rows('fromsession'));
    const daemonFile = path.join(dir, 'daemon-connections.json');
    writeFileSync(daemonFile, rows('fromdaemon'));
    const sandbox = makeSandbox(cleanup);
    const own = cliEnv(sandbox, { SANDBOXD_SSH_BRIDGE: 'tunnel', SSH_AUTH_SOCK: env.SSH_AUTH_SOCK ?? '' });
    await startDaemon({ ...own, PODMAN_CONNECTIONS_CONF: daemonFile }, cleanup);
    const plan = async (extra: NodeJS.ProcessEnv) => {
      const result = await cli(['plan', '--engine', 'podman', '--json'], { ...own, PATH: `${bin}:/usr/bin:/bin`, ...extra }, 40_000);
      return (JSON.parse(result.stdout) as ErrorJson).error;
    };
    expect(await plan({ PODMAN_CONNECTIONS_CONF: sessionFile })).toMatchObject({
      code: 'PODMAN_CONNECTION_UNSUPPORTED',
      message: 'connection fromsession is unix:// (unix:///run/fromsession.sock), not ssh://; there is no VM to tunnel into',
    });
    expect(await plan({})).toMatchObject({ code: 'PODMAN_NO_CONNECTIONS' });
  });
});
