import { describe, expect, it } from 'vitest';
import { chooseBridge, type BridgeSelectInput } from '../../daemon/plan/bridge-select.js';

const base: BridgeSelectInput = { setting: 'auto', engine: 'podman', platform: 'linux', env: {}, connectionRequested: false };

describe('chooseBridge (DESIGN §6: is Podman remote at all?)', () => {
  it('auto: tunnel for Podman on macOS, direct mount for local Podman on Linux even with connections listed', () => {
    expect(chooseBridge({ ...base, platform: 'darwin' })).toEqual({ kind: 'tunnel' });
    expect(chooseBridge(base)).toEqual({ kind: 'mount' });
  });

  it('auto: tunnel for Linux Podman made remote by CONTAINER_HOST, CONTAINER_CONNECTION or an explicit connection', () => {
    expect(chooseBridge({ ...base, env: { CONTAINER_HOST: 'ssh://core@h/x' } })).toEqual({ kind: 'tunnel' });
    expect(chooseBridge({ ...base, env: { CONTAINER_HOST: 'unix:///run/podman.sock' } })).toEqual({ kind: 'mount' });
    expect(chooseBridge({ ...base, env: { CONTAINER_CONNECTION: 'm' } })).toEqual({ kind: 'tunnel' });
    expect(chooseBridge({ ...base, connectionRequested: true })).toEqual({ kind: 'tunnel' });
  });

  it('auto: Docker on either platform asks its engine (DESIGN §7); desktop asks for its built-in socket only', () => {
    expect(chooseBridge({ ...base, engine: 'docker' })).toEqual({ kind: 'engine', builtinOnly: false });
    expect(chooseBridge({ ...base, engine: 'docker', platform: 'darwin' })).toEqual({ kind: 'engine', builtinOnly: false });
    expect(chooseBridge({ ...base, engine: 'docker', setting: 'desktop' })).toEqual({ kind: 'engine', builtinOnly: true });
    expect(chooseBridge({ ...base, setting: 'desktop' })).toEqual({ kind: 'unavailable', reason: 'the desktop bridge is a Docker engine\'s built-in agent socket; podman has none' });
  });

  it('explicit settings win, and impossible ones say why', () => {
    expect(chooseBridge({ ...base, setting: 'tunnel' })).toEqual({ kind: 'tunnel' });
    expect(chooseBridge({ ...base, setting: 'tunnel', engine: 'docker' })).toMatchObject({ kind: 'unavailable' });
    expect(chooseBridge({ ...base, setting: 'mount', engine: 'docker' })).toEqual({ kind: 'mount' });
    expect(chooseBridge({ ...base, setting: 'mount', platform: 'darwin' })).toMatchObject({ kind: 'unavailable', reason: expect.stringContaining('cannot be bind-mounted') as string });
    expect(chooseBridge({ ...base, setting: 'none' })).toEqual({ kind: 'unavailable', reason: 'the ssh bridge is none for this session' });
  });
});
