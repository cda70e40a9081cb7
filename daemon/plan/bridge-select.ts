import type { Engine } from '../../shared/contracts/common.js';
import type { ClientEnv, SshBridgeSetting } from '../../shared/contracts/sessions.js';
import type { Platform } from '../../shared/paths.js';

/** `engine`: ask the Docker engine behind the session's context (DESIGN §7). */
export type BridgeChoice = { kind: 'mount' } | { kind: 'tunnel' } | { kind: 'engine'; builtinOnly: boolean } | { kind: 'unavailable'; reason: string };

export interface BridgeSelectInput {
  setting: SshBridgeSetting;
  engine: Engine;
  platform: Platform;
  env: ClientEnv;
  connectionRequested: boolean;
}

/**
 * DESIGN §6 "Is Podman remote at all?": on Linux the podman binary stays local even when a Default
 * connection is listed; it goes remote only with CONTAINER_HOST, CONTAINER_CONNECTION or an
 * explicit connection. On macOS every engine runs in a VM, where a socket cannot be bind-mounted.
 * Docker under `auto` (or `desktop`) is decided by what its engine turns out to be.
 */
export function chooseBridge(input: BridgeSelectInput): BridgeChoice {
  const { setting, engine, platform } = input;
  if (setting === 'none') return { kind: 'unavailable', reason: 'the ssh bridge is none for this session' };
  if (setting === 'desktop') {
    return engine === 'docker' ? { kind: 'engine', builtinOnly: true } : { kind: 'unavailable', reason: 'the desktop bridge is a Docker engine\'s built-in agent socket; podman has none' };
  }
  if (setting === 'tunnel') {
    return engine === 'podman' ? { kind: 'tunnel' } : { kind: 'unavailable', reason: 'the tunnel bridge needs a Podman connection; docker has none' };
  }
  if (setting === 'mount') {
    return platform === 'darwin'
      ? { kind: 'unavailable', reason: 'on macOS a Unix socket cannot be bind-mounted into the VM; use the tunnel bridge' }
      : { kind: 'mount' };
  }
  if (engine === 'docker') return { kind: 'engine', builtinOnly: false };
  const remote =
    platform === 'darwin' ||
    input.connectionRequested ||
    (input.env.CONTAINER_CONNECTION ?? '') !== '' ||
    (input.env.CONTAINER_HOST ?? '').startsWith('ssh://');
  return remote ? { kind: 'tunnel' } : { kind: 'mount' };
}
