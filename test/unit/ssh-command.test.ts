import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { backoffMs, classifySshFailure, remoteScript, shQuote, sshArgs, tunnelLayout } from '../../daemon/tunnels/ssh-command.js';
import { parseSshUri } from '../../daemon/podman/connections.js';

const connection = (uri: string, identity: string | null = '/k/id') => ({ name: 'm', uri, identity, isDefault: true, target: parseSshUri(uri, 'm') });
const layout = tunnelLayout('/tmp/sandboxd-u', 'abc', 3, 'n0nce');

describe('ssh command', () => {
  it('binds a fresh name beside the tunnel dir and publishes it inside', () => {
    expect(layout).toEqual({ dir: '/tmp/sandboxd-u/abc', generationName: 'a-3-n0nce.sock', bindPath: '/tmp/sandboxd-u.abc.a-3-n0nce.sock' });
  });

  it('treats a loopback machine like `podman machine ssh` and checks host keys elsewhere', () => {
    const base = { agentSocket: '/a.sock', layout, knownHostsPath: '/state/known_hosts', aliveIntervalSeconds: 5, aliveCountMax: 3, connectTimeoutSeconds: 8 };
    const local = sshArgs({ ...base, connection: connection('ssh://core@127.0.0.1:5000/x') });
    expect(local).toEqual(expect.arrayContaining(['-F', '/dev/null', 'UserKnownHostsFile=/dev/null', 'ExitOnForwardFailure=yes', 'ServerAliveInterval=5', '-p', '5000', '-i', '/k/id']));
    expect(local).toContain('-R');
    expect(local[local.indexOf('-R') + 1]).toBe('/tmp/sandboxd-u.abc.a-3-n0nce.sock:/a.sock');
    expect(local.at(-2)).toBe('core@127.0.0.1');
    const remote = sshArgs({ ...base, connection: connection('ssh://[2001:db8::1]/x', null) });
    expect(remote).toEqual(expect.arrayContaining(['StrictHostKeyChecking=accept-new', 'UserKnownHostsFile=/state/known_hosts', '-p', '22']));
    expect(remote).not.toContain('-i');
    expect(remote.at(-2)).toBe('2001:db8::1');
  });

  it('builds a remote script that a POSIX shell parses, with every value quoted', () => {
    const hostile = tunnelLayout("/tmp/it's $(x)", 'h', 1, 'n');
    const script = remoteScript(hostile);
    expect(script).toContain(`d='/tmp/it'\\''s $(x)/h'`);
    execFileSync('sh', ['-n', '-c', script]);
    expect(shQuote("a'b")).toBe(`'a'\\''b'`);
  });

  it('classifies ssh failures by its stderr, keeping its line', () => {
    expect(classifySshFailure('m', 'ssh: connect to host 127.0.0.1 port 1: Connection refused\n', 255)).toMatchObject({
      code: 'TUNNEL_UNREACHABLE',
      message: 'the machine behind connection m is unreachable: ssh: connect to host 127.0.0.1 port 1: Connection refused',
    });
    expect(classifySshFailure('m', 'root@127.0.0.1: Permission denied (publickey).\n', 255)).toMatchObject({
      code: 'TUNNEL_AUTH_FAILED',
      message: 'ssh to connection m was refused: root@127.0.0.1: Permission denied (publickey).',
    });
    expect(classifySshFailure('m', 'Error: remote port forwarding failed for listen path /x\n', 255)).toMatchObject({ code: 'TUNNEL_FAILED' });
    expect(classifySshFailure('m', '', 1).message).toContain('ssh exited with code 1');
  });

  it('backs off exponentially with a cap', () => {
    expect([0, 1, 2, 3, 4, 5, 10].map((attempt) => backoffMs(attempt))).toEqual([500, 1000, 2000, 4000, 8000, 8000, 8000]);
  });
});
