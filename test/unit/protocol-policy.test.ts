import { describe, expect, it } from 'vitest';
import { PROTOCOL_VERSION } from '../../shared/protocol.js';
import { protocolMismatch, requestedProtocol } from '../../shared/protocol-policy.js';

describe('protocol policy', () => {
  it('reads the version a request asks for; no header is protocol 1, which did not send one', () => {
    expect(requestedProtocol(undefined)).toBe(1);
    expect(requestedProtocol('2')).toBe(2);
    expect(requestedProtocol(['3', '4'])).toBe(3);
    for (const bad of ['', 'two', '0', '-1', '1.5', '9999999']) expect(requestedProtocol(bad)).toBeNull();
  });

  it('refuses another version with PROTOCOL_MISMATCH and the remedy for each side', () => {
    expect(protocolMismatch(PROTOCOL_VERSION + 1).toJSON()).toEqual({
      code: 'PROTOCOL_MISMATCH',
      message: `this daemon serves protocol ${String(PROTOCOL_VERSION)}; the client speaks protocol ${String(PROTOCOL_VERSION + 1)}`,
      remedy: 'Run `sandboxd restart` to start the newer installed version.',
    });
    expect(protocolMismatch(1).remedy).toBe('Upgrade the program that embeds the older sandboxd client, or stop its sessions and run `sandboxd restart`.');
    expect(protocolMismatch(null).message).toBe(`this daemon serves protocol ${String(PROTOCOL_VERSION)}; the client speaks an unreadable version`);
  });
});
