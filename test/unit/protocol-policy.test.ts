import { describe, expect, it } from 'vitest';
import type { AcquireResponse } from '../../shared/contracts/sessions.js';
import { PROTOCOL_VERSION } from '../../shared/protocol.js';
import { downgradeAcquireResponse, OLDEST_SERVED_PROTOCOL, protocolMismatch, requestedProtocol, servesProtocol } from '../../shared/protocol-policy.js';

describe('protocol policy: one daemon, clients of this and the previous protocol', () => {
  it('reads the client\'s version from its header; none at all is protocol 1', () => {
    expect(requestedProtocol(undefined)).toBe(1);
    expect(requestedProtocol('2')).toBe(2);
    expect(requestedProtocol(['3', '4'])).toBe(3);
    for (const bad of ['', 'two', '0', '-1', '1.5', '9999999']) expect(requestedProtocol(bad)).toBeNull();
  });

  it('serves its own version and the one before, nothing newer, nothing older, nothing unreadable', () => {
    expect(OLDEST_SERVED_PROTOCOL).toBe(Math.max(1, PROTOCOL_VERSION - 1));
    expect(servesProtocol(PROTOCOL_VERSION)).toBe(true);
    expect(servesProtocol(OLDEST_SERVED_PROTOCOL)).toBe(true);
    expect(servesProtocol(PROTOCOL_VERSION + 1)).toBe(false);
    expect(servesProtocol(OLDEST_SERVED_PROTOCOL - 1)).toBe(false);
    expect(servesProtocol(null)).toBe(false);
  });

  it('refuses with PROTOCOL_MISMATCH naming both sides and the side to upgrade', () => {
    const newer = protocolMismatch(PROTOCOL_VERSION + 1);
    expect(newer.code).toBe('PROTOCOL_MISMATCH');
    expect(newer.message).toContain(`the client speaks protocol ${PROTOCOL_VERSION + 1}`);
    expect(newer.remedy).toBe('Run `sandboxd restart` to start the newer installed version.');
    expect(protocolMismatch(0).remedy).toBe('Upgrade the program that embeds the older sandboxd client.');
    expect(protocolMismatch(null).message).toContain('an unreadable version');
  });
});

describe('downgradeAcquireResponse', () => {
  const response: AcquireResponse = {
    session: {
      id: 'ses_abcdef12',
      engine: 'podman',
      label: null,
      clientPid: 10,
      createdAt: '2026-01-01T00:00:00.000Z',
      lastHeartbeatAt: '2026-01-01T00:00:00.000Z',
      ssh: { status: 'skipped', reason: 'off' },
    },
    plan: {
      mounts: [],
      env: { A: '1' },
      spawnEnv: { SECRET: 's3cret' },
      globalArgs: ['--connection', 'm'],
      flags: [],
      args: ['-e', 'A=1', '-e', 'SECRET'],
      warnings: [],
    },
    leaseTtlMs: 30_000,
    heartbeatIntervalMs: 10_000,
    sockets: [{ name: 'p', status: 'skipped', reason: 'gone' }],
  };

  it('gives a protocol-1 client the shape it knows, never a by-name value on an argv, and says what it lacks', () => {
    expect(downgradeAcquireResponse(response, 1)).toEqual({
      session: response.session,
      plan: {
        mounts: [],
        env: { A: '1' },
        flags: [],
        args: ['-e', 'A=1'],
        warnings: ['this client speaks protocol 1, so the session goes without the variables SECRET and the engine arguments --connection m; upgrade it'],
      },
      leaseTtlMs: 30_000,
      heartbeatIntervalMs: 10_000,
    });
  });

  it('leaves a protocol-2 reply alone', () => {
    expect(downgradeAcquireResponse(response, 2)).toBe(response);
  });
});
