import { promises as fs } from 'node:fs';
import path from 'node:path';
import { ERROR_SPECS, SandboxdError } from '../../shared/errors.js';
import { MAX_SOCKET_PATH_BYTES, type Platform, type SandboxdPaths } from '../../shared/paths.js';
import { PROTOCOL_VERSION } from '../../shared/protocol.js';
import type { ReadableResponse, StatusResponse } from '../../shared/contracts/status.js';
import type { PodmanConnection } from '../../daemon/podman/connections.js';
import { VERSION } from '../../daemon/os/package-files.js';
import type { AgentSocketCheck } from '../../daemon/plan/agent-socket.js';
import { privacyDenied } from '../../daemon/os/privacy.js';
import { engineStartRemedy, type ContainerProbe } from './container-check.js';

export type CheckState = 'ok' | 'fail' | 'skip';

/** One line of `sandboxd doctor`: `skip` is a check that does not apply here, never a failure. */
export interface CheckResult {
  name: string;
  state: CheckState;
  detail: string;
  remedy: string | null;
}

const ok = (name: string, detail: string): CheckResult => ({ name, state: 'ok', detail, remedy: null });
const skip = (name: string, detail: string): CheckResult => ({ name, state: 'skip', detail, remedy: null });
const fail = (name: string, detail: string, remedy: string): CheckResult => ({ name, state: 'fail', detail, remedy });

function fromError(name: string, error: unknown): CheckResult {
  const mapped = error instanceof SandboxdError ? error : new SandboxdError('INTERNAL', error instanceof Error ? error.message : String(error));
  return fail(name, mapped.message, mapped.remedy);
}

/** package.json's engines: >=20.19. */
export function checkNode(version: string): CheckResult {
  const [major = 0, minor = 0] = version.replace(/^v/, '').split('.').map(Number);
  return major > 20 || (major === 20 && minor >= 19)
    ? ok('node', `v${version.replace(/^v/, '')}`)
    : fail('node', `v${version.replace(/^v/, '')} is older than 20.19`, 'Install Node 20.19 or newer.');
}

export function checkSocketPath(paths: SandboxdPaths, platform: Platform): CheckResult {
  const length = Buffer.byteLength(paths.socketPath);
  const limit = MAX_SOCKET_PATH_BYTES[platform];
  return length <= limit
    ? ok('socket path', `${paths.socketPath} (${length} of ${limit} bytes)`)
    : fail('socket path', `${paths.socketPath} is ${length} bytes; ${platform} allows ${limit}`, ERROR_SPECS.SOCKET_PATH_TOO_LONG.remedy);
}

/** Each of sandboxd's directories that exists must be the user's and closed to others (DESIGN §3). */
export async function checkDirectories(paths: SandboxdPaths, uid: number): Promise<CheckResult> {
  const problems: string[] = [];
  const dirs = [...new Set([paths.runtimeDir, paths.stateDir, paths.logDir])];
  for (const dir of dirs) {
    const stat = await fs.lstat(dir).catch(() => null);
    if (stat === null) continue;
    if (!stat.isDirectory()) problems.push(`${dir} is not a directory`);
    else if (stat.uid !== uid) problems.push(`${dir} is owned by uid ${stat.uid}`);
    else if ((stat.mode & 0o077) !== 0) problems.push(`${dir} has mode 0${(stat.mode & 0o777).toString(8)}`);
  }
  return problems.length === 0
    ? ok('directories', `${dirs.join(', ')}: yours, 0700 (or not created yet)`)
    : fail('directories', problems.join('; '), ERROR_SPECS.INSECURE_DIRECTORY.remedy);
}

/** The daemon's status, or the error that stood in the way (not running is not a failure). */
export type DaemonProbe = { status: StatusResponse } | { error: unknown };

export function checkDaemon(probe: DaemonProbe, autoStart: boolean, socketPath: string): CheckResult {
  if ('error' in probe) {
    if (probe.error instanceof SandboxdError && probe.error.code === 'DAEMON_NOT_RUNNING') {
      return autoStart
        ? ok('daemon', `not running (socket ${socketPath}); it starts on first use`)
        : fail('daemon', `not running (socket ${socketPath}), and SANDBOXD_NO_AUTOSTART keeps clients from starting it`, 'Run `sandboxd start`.');
    }
    return fromError('daemon', probe.error);
  }
  const { status } = probe;
  if (status.version !== VERSION || status.protocol !== PROTOCOL_VERSION) {
    return fail('daemon', `pid ${status.pid} runs ${status.version} (protocol ${status.protocol}); this client is ${VERSION} (protocol ${PROTOCOL_VERSION})`, ERROR_SPECS.PROTOCOL_MISMATCH.remedy);
  }
  return ok('daemon', `${status.version} (protocol ${status.protocol}), pid ${status.pid}, ${status.counts.sessions} sessions, socket ${status.socketPath}`);
}

/** Daemons and sockets of an earlier layout (client/other-daemons.ts): one stray may act on this state dir. */
export function checkOtherDaemons(warnings: readonly { detail: string; remedy: string }[], looked: readonly string[]): CheckResult {
  const name = 'other daemons';
  if (looked.length === 0) return skip(name, 'no earlier layout on this platform');
  if (warnings.length === 0) return ok(name, `none at ${looked.join(', ')}`);
  return fail(name, warnings.map((warning) => warning.detail).join('; '), warnings.map((warning) => warning.remedy).join(' '));
}

/** Which engine `run` and `plan` would use here, and why; null when none is on PATH. */
export type EngineUse = { engine: 'podman' | 'docker'; why: string } | null;

export function checkEngines(found: Readonly<Record<'podman' | 'docker', string | null>>, used: EngineUse): CheckResult[] {
  const none = found.podman === null && found.docker === null;
  return (['podman', 'docker'] as const).map((name) => {
    const file = found[name];
    if (file === null) return none ? fail(name, 'not on PATH', ERROR_SPECS.ENGINE_NOT_FOUND.remedy) : skip(name, 'not on PATH');
    if (used === null || used.engine === name) return ok(name, used === null ? file : `${file}, the engine \`run\` uses (${used.why})`);
    return skip(name, `${file}, not the engine \`run\` uses (${used.why})`);
  });
}

/**
 * Would a run work here: a minimal container started through the engine `run` uses, the first
 * failing step named once (the engine's server, the image, the container, its default network),
 * with what fixes it in doctor's own shell.
 */
export function checkContainer(engine: 'podman' | 'docker' | null, probe: ContainerProbe | null, platform: Platform): CheckResult {
  const name = 'container';
  if (engine === null || probe === null) return skip(name, 'no engine to start one with');
  switch (probe.step) {
    case 'ok':
      return ok(name, `${engine} started one (sandboxd's image ${probe.image}, with no network and with ${engine}'s default network)`);
    case 'engine':
      return fail(name, `${engine}'s server does not answer: ${probe.reason}`, engineStartRemedy(engine, platform));
    case 'image':
      return fail(name, `${engine} cannot load sandboxd's own image, so no container was tried: ${probe.reason}`, `Run \`${engine} info\` and \`${engine} images\` to see what its storage says.`);
    case 'run':
      return fail(name, `${engine} cannot start a container: ${probe.reason}`, `Run \`${probe.command}\` to see the whole error.`);
    case 'network':
      return fail(
        name,
        `${engine} starts containers with no network, but not with its default network: ${probe.reason}`,
        engine === 'podman' && platform === 'linux'
          ? 'Rootless Podman could not set up the network (slirp4netns or pasta needs /dev/net/tun). Give containers no network by default: put `netns = "none"` under `[containers]` in ~/.config/containers/containers.conf; or pass `--network none` to each run that needs none; or make /dev/net/tun usable.'
          : `Run \`${probe.command}\` to see the whole error.`,
      );
  }
}

/** What Podman discovery answered for this shell: a connection, none (local Podman), or an error. */
export type ConnectionProbe = { connection: PodmanConnection } | { error: unknown } | { podman: false };

export function checkConnection(probe: ConnectionProbe, needed: boolean): CheckResult {
  const name = 'podman connection';
  if ('podman' in probe) return skip(name, 'podman is not on PATH');
  if ('connection' in probe) {
    const { connection } = probe;
    return ok(name, `${connection.name}${connection.isDefault ? ' (default)' : ''}: ${connection.uri}`);
  }
  if (!needed && probe.error instanceof SandboxdError && probe.error.code === 'PODMAN_NO_CONNECTIONS') {
    return skip(name, 'none; podman runs containers on this host');
  }
  return needed ? fromError(name, probe.error) : skip(name, `${probe.error instanceof Error ? probe.error.message : String(probe.error)} (not used: podman is local)`);
}

/** One bounded `ssh … true` over the connection's own login; a local Podman does not need it. */
export function checkMachineSsh(result: { exitCode: number | null; error: SandboxdError | null } | null, connection: string, needed: boolean): CheckResult {
  const name = 'machine over ssh';
  if (result === null) return skip(name, 'no connection to check');
  if (result.exitCode === 0) return ok(name, `${connection} answers`);
  const error = result.error ?? new SandboxdError('TUNNEL_FAILED', `ssh to ${connection} failed`);
  return needed ? fail(name, error.message, error.remedy) : skip(name, `${error.message} (not used: podman is local)`);
}

export const NO_KEYS_REMEDY =
  'Add a key with `ssh-add`, or point SSH_AUTH_SOCK at the agent your ~/.ssh/config names in IdentityAgent (1Password, Secretive).';

/** Doctor runs in the user's shell, where an agent of its own is what the remedy starts. */
export const NO_AGENT_REMEDY = 'Start an agent with your key in this shell: `eval "$(ssh-agent -s)" && ssh-add`.';

export function checkAgent(check: AgentSocketCheck): CheckResult {
  if (!check.usable) return fail('ssh agent', check.reason, NO_AGENT_REMEDY);
  if (check.keys === 0) return fail('ssh agent', `${check.realpath} answers but holds no keys`, NO_KEYS_REMEDY);
  return ok('ssh agent', `${check.realpath}: ${check.keys === null ? 'answers' : `${check.keys} key${check.keys === 1 ? '' : 's'}`}`);
}

export function checkDockerEngines(probe: DaemonProbe): CheckResult[] {
  const name = 'docker engine';
  if ('error' in probe) return [skip(name, 'the daemon is not running; engines are identified by it')];
  if (probe.status.engines.length === 0) return [skip(name, 'none identified yet (the first docker session does it)')];
  return probe.status.engines.map((engine) =>
    engine.bridge.startsWith('skip')
      ? fail(name, `${engine.name} (${engine.kind}) at ${engine.endpoint}: ${engine.bridge}`, 'See the remedy in `sandboxd plan --engine docker`; docs/engines.md lists each engine\'s.')
      : ok(name, `${engine.name} (${engine.kind}) at ${engine.endpoint}: bridge ${engine.bridge}`),
  );
}

/** What `doctor` learned about the login service; `unreachable`: why its manager does not answer here. */
export interface ServiceState {
  kind: string;
  files: readonly string[];
  installed: boolean;
  unreachable: { reason: string; remedy: string } | null;
  /** The installed command's program or entry is gone; null when both exist. */
  programProblem: string | null;
  loaded: boolean;
  lastExit: string | null;
}

/**
 * Never recommends a command that fails the same way: with no manager reachable from this shell
 * (`su -` on Linux, ssh without a desktop login on a Mac), `sandboxd install` is not offered.
 */
export function checkService(state: ServiceState): CheckResult {
  const name = 'login service';
  const where = `${state.kind}: ${state.files.map((file) => path.basename(file)).join(', ')}`;
  if (!state.installed) {
    return state.unreachable === null
      ? skip(name, 'not installed; clients start the daemon (`sandboxd install` starts it at login)')
      : skip(name, `not installed; clients start the daemon. It cannot be installed from here: ${state.unreachable.reason}`);
  }
  const again = 'Run `sandboxd install` again: it names the node on your PATH and this sandboxd (clients start the daemon themselves meanwhile).';
  if (state.programProblem !== null) return fail(name, `installed (${where}), but ${state.programProblem}`, state.unreachable?.remedy ?? again);
  if (state.unreachable !== null) return skip(name, `installed (${where}); nothing more can be asked from this shell (${state.unreachable.reason})`);
  const last = state.lastExit === null ? '' : `; ${state.lastExit}`;
  return state.loaded ? ok(name, `installed and loaded (${where})${last}`) : fail(name, `installed but not loaded (${where})${last}`, 'Run `sandboxd install` again.');
}

export interface PrivacyProbe {
  platform: Platform;
  /** The directory doctor runs in: the project a session would be asked for. */
  cwd: string;
  home: string;
  /** The daemon's answer; null when no daemon runs to ask. */
  answer: ReadableResponse | { error: unknown } | null;
}

/**
 * macOS privacy judges the daemon apart from this terminal (a launchd service is its own), so
 * the daemon is asked whether it may read the directory doctor runs in.
 */
export function checkPrivacy(probe: PrivacyProbe): CheckResult {
  const name = 'privacy';
  if (probe.platform !== 'darwin') return skip(name, 'only macOS guards folders from the daemon');
  if (probe.answer === null) return skip(name, 'the daemon is not running; it is asked when it runs');
  if ('error' in probe.answer) return skip(name, `cannot ask the daemon: ${probe.answer.error instanceof Error ? probe.answer.error.message : String(probe.answer.error)}`);
  const { readable, binary, launchd } = probe.answer;
  if (readable) return ok(name, `the daemon (${binary}${launchd ? ', started by launchd' : ''}) may read ${probe.cwd}`);
  const denied = privacyDenied(probe.cwd, probe.home, { binary, launchd });
  return fail(name, denied.message, denied.remedy);
}
