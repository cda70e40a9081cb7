import { PROTOCOL_VERSION } from '../../shared/protocol.js';

/** A daemon's status answer, as the contract reads it, for fake daemons. */
export const STATUS = {
  version: '0.1.0',
  protocol: PROTOCOL_VERSION,
  pid: 4242,
  startedAt: '2026-11-22T10:00:00.000Z',
  uptimeMs: 1000,
  socketPath: '/run/user/1000/sandboxd/sandboxd.sock',
  logPath: null,
  platform: 'linux',
  counts: { sessions: 0, tunnels: 0 },
  engines: [],
};
