import { describe, expect, it } from 'vitest';
import { parseConnectionList, parseSshUri, selectConnection } from '../../daemon/podman/connections.js';

const row = (Name: string, URI: string, Default = false, Identity = '') => ({ Name, URI, Default, Identity });

describe('parseSshUri', () => {
  it('reads user, host, port and path', () => {
    expect(parseSshUri('ssh://core@127.0.0.1:53219/run/user/501/podman/podman.sock', 'm')).toEqual({
      user: 'core',
      host: '127.0.0.1',
      port: 53219,
      path: '/run/user/501/podman/podman.sock',
    });
  });

  it('unbrackets IPv6 hosts and defaults the port to 22', () => {
    expect(parseSshUri('ssh://root@[::1]/run/podman/podman.sock', 'v6')).toMatchObject({ host: '::1', port: 22, user: 'root' });
    expect(parseSshUri('ssh://host.example/x', 'h')).toMatchObject({ user: null, host: 'host.example', port: 22 });
  });

  it('refuses non-ssh and broken URIs with codes', () => {
    expect(() => parseSshUri('unix:///run/podman/podman.sock', 'local')).toThrow(
      expect.objectContaining({ code: 'PODMAN_CONNECTION_UNSUPPORTED', message: expect.stringContaining('connection local is unix://') as string }) as Error,
    );
    expect(() => parseSshUri('not a uri', 'x')).toThrow(expect.objectContaining({ code: 'PODMAN_CONNECTIONS_UNPARSABLE' }) as Error);
  });
});

describe('parseConnectionList', () => {
  it('accepts podman output, including null and extra fields', () => {
    expect(parseConnectionList('null')).toEqual([]);
    const rows = parseConnectionList(JSON.stringify([{ ...row('a', 'ssh://h/x'), ReadWrite: true }]));
    expect(rows[0]).toMatchObject({ Name: 'a', URI: 'ssh://h/x' });
  });

  it('reports output that is not the expected JSON', () => {
    expect(() => parseConnectionList('Error: oops')).toThrow(
      expect.objectContaining({ code: 'PODMAN_CONNECTIONS_UNPARSABLE', message: 'cannot read `podman system connection list --format json`: it is not JSON: Error: oops' }) as Error,
    );
    expect(() => parseConnectionList('{"Name": 1}')).toThrow(
      expect.objectContaining({ code: 'PODMAN_CONNECTIONS_UNPARSABLE', message: 'cannot read `podman system connection list --format json`: Invalid input: expected array, received object' }) as Error,
    );
  });
});

describe('selectConnection', () => {
  const rows = [row('a', 'ssh://u@127.0.0.1:1/x', false, '/k/a'), row('b', 'ssh://u@127.0.0.1:2/x', true)];

  it('prefers the explicit option, then CONTAINER_CONNECTION, then Default', () => {
    expect(selectConnection({ rows, requested: 'a', envConnection: 'b' }).name).toBe('a');
    expect(selectConnection({ rows, envConnection: 'a' })).toMatchObject({ name: 'a', identity: '/k/a' });
    expect(selectConnection({ rows })).toMatchObject({ name: 'b', identity: null, isDefault: true });
  });

  it('keeps whether podman says the connection is a machine, and leaves it unknown when podman does not say', () => {
    const listed = parseConnectionList(JSON.stringify([{ Name: 'm', URI: 'ssh://core@127.0.0.1:5/x', Default: true, IsMachine: true }, { Name: 'r', URI: 'ssh://h/x', IsMachine: false }]));
    expect(selectConnection({ rows: listed, requested: 'm' }).isMachine).toBe(true);
    expect(selectConnection({ rows: listed, requested: 'r' }).isMachine).toBe(false);
    expect(selectConnection({ rows: [row('old', 'ssh://h/x')] }).isMachine).toBe(false);
  });

  it('takes the only connection even when it is not Default', () => {
    expect(selectConnection({ rows: [row('only', 'ssh://h/x')] }).name).toBe('only');
  });

  it('fails with a code for each way selection cannot decide', () => {
    expect(() => selectConnection({ rows: [] })).toThrow(expect.objectContaining({ code: 'PODMAN_NO_CONNECTIONS' }) as Error);
    expect(() => selectConnection({ rows: [row('a', 'ssh://h/x'), row('c', 'ssh://h/y')] })).toThrow(
      expect.objectContaining({ code: 'PODMAN_NO_DEFAULT_CONNECTION', message: 'podman lists 2 connections and none is the default: a, c' }) as Error,
    );
    expect(() => selectConnection({ rows, requested: 'zz' })).toThrow(
      expect.objectContaining({ code: 'PODMAN_CONNECTION_NOT_FOUND', message: 'the session asked for connection "zz", which podman does not list (it lists: a, b)' }) as Error,
    );
    expect(() => selectConnection({ rows, envConnection: 'yy' })).toThrow(
      expect.objectContaining({ message: expect.stringContaining('CONTAINER_CONNECTION names connection "yy"') as string }) as Error,
    );
  });
});
