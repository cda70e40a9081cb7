import os from 'node:os';
import type { Command } from 'commander';
import { SandboxdError } from '../../../shared/errors.js';
import { currentPlatform, otherLayoutSockets, resolvePaths, type Platform, type SandboxdPaths } from '../../../shared/paths.js';
import { CLIENT_ENV_NAMES, type ClientEnv } from '../../../shared/contracts/sessions.js';
import { inspectAgentSocket } from '../../../daemon/plan/agent-socket.js';
import type { PodmanConnection } from '../../../daemon/podman/connections.js';
import { findExecutable } from '../../../daemon/os/executables.js';
import { discoverConnection } from '../../../daemon/podman/discover.js';
import { runSubprocess } from '../../../daemon/os/subprocess.js';
import { classifySshFailure, sshLoginArgs } from '../../../daemon/podman/ssh-command.js';
import { getStatus, checkReadable } from '../../daemon-calls.js';
import {
  checkAgent,
  checkConnection,
  checkContainer,
  checkDaemon,
  checkDirectories,
  checkDockerEngines,
  checkEngines,
  checkMachineSsh,
  checkNode,
  checkOtherDaemons,
  checkPrivacy,
  checkService,
  checkSocketPath,
  type CheckResult,
  type ConnectionProbe,
  type DaemonProbe,
  type EngineUse,
  type ServiceState,
} from '../../doctor/checks.js';
import { probeContainer, type ContainerProbe } from '../../doctor/container-check.js';
import { chooseEngine, systemProbes } from '../engine-choice.js';
import { ownerLabel } from '../../../daemon/os/owner-label.js';
import { envFlag } from '../../env-flags.js';
import { findOtherDaemons, otherDaemonWarnings } from '../../other-daemons.js';
import { managerInputs, managerRunner } from '../../service/control.js';
import { assertReachable, programProblem, serviceManager } from '../../service/manager.js';
import { fileExists } from '../../service/service.js';
import { printJson, runAction } from '../output.js';

/** One login, bounded: a machine that is down must not hang `doctor`. */
const SSH_CONNECT_TIMEOUT_S = 5;
const SSH_TIMEOUT_MS = 10_000;
const MARKS = { ok: '✓', fail: '✗', skip: '-' } as const;

function clientEnv(env: NodeJS.ProcessEnv): ClientEnv {
  const picked: ClientEnv = {};
  for (const name of CLIENT_ENV_NAMES) {
    const value = env[name];
    if (value !== undefined && value !== '') picked[name] = value;
  }
  return picked;
}

/** DESIGN §6: Podman goes through a connection on macOS, or on Linux when made remote. */
function connectionNeeded(env: NodeJS.ProcessEnv, platform: Platform): boolean {
  if (platform === 'darwin') return true;
  return [env.CONTAINER_CONNECTION, env.CONTAINER_HOST].some((value) => value !== undefined && value !== '') || env.SANDBOXD_SSH_BRIDGE === 'tunnel';
}

async function probeConnection(env: NodeJS.ProcessEnv, home: string, podman: string | null): Promise<ConnectionProbe> {
  if (podman === null) return { podman: false };
  try {
    return { connection: await discoverConnection({ path: env.PATH ?? '', env: clientEnv(env) }, { home, run: runSubprocess }) };
  } catch (error) {
    return { error };
  }
}

async function sshTrue(connection: PodmanConnection, paths: SandboxdPaths): Promise<{ exitCode: number | null; error: SandboxdError | null }> {
  const { target } = connection;
  const args = [
    ...sshLoginArgs({ connection, knownHostsPath: paths.knownHostsPath, aliveIntervalSeconds: 5, aliveCountMax: 1, connectTimeoutSeconds: SSH_CONNECT_TIMEOUT_S }),
    '--',
    target.user === null ? target.host : `${target.user}@${target.host}`,
    'true',
  ];
  const result = await runSubprocess('ssh', args, { env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? os.homedir() }, timeoutMs: SSH_TIMEOUT_MS });
  return { exitCode: result.exitCode, error: result.exitCode === 0 ? null : classifySshFailure(connection.name, result.stderr, result.exitCode) };
}

async function serviceState(platform: Platform): Promise<ServiceState> {
  const manager = serviceManager(managerInputs(process.env, platform));
  const run = await managerRunner(process.env, platform);
  const unreachable = await assertReachable(manager, run).then(
    () => null,
    (error: unknown) => (error instanceof SandboxdError ? { reason: error.message, remedy: error.remedy } : { reason: String(error), remedy: '' }),
  );
  const state: ServiceState = { kind: manager.kind, files: manager.files, installed: await fileExists(manager.files[0] ?? ''), unreachable, programProblem: null, loaded: false, lastExit: null };
  if (!state.installed) return state;
  state.programProblem = await programProblem(manager);
  if (unreachable !== null) return state;
  const [loadedFile = '', ...loadedArgs] = manager.loadedArgv;
  const [statusFile = '', ...statusArgs] = manager.statusArgv;
  const [loaded, status] = await Promise.all([run(loadedFile, loadedArgs), run(statusFile, statusArgs)]);
  return { ...state, loaded: loaded.exitCode === 0, lastExit: status.exitCode === 0 ? manager.lastExit(status.stdout) : null };
}

/** The engine `run` would use from this shell; null when none is on PATH. */
async function engineInUse(env: NodeJS.ProcessEnv): Promise<EngineUse> {
  try {
    return await chooseEngine(undefined, env, systemProbes(env));
  } catch (error) {
    if (error instanceof SandboxdError && error.code === 'ENGINE_NOT_FOUND') return null;
    throw error;
  }
}

function stringEnv(env: NodeJS.ProcessEnv): Record<string, string> {
  return Object.fromEntries(Object.entries(env).filter((entry): entry is [string, string] => entry[1] !== undefined));
}

export async function runChecks(env: NodeJS.ProcessEnv): Promise<CheckResult[]> {
  const platform = currentPlatform();
  const home = env.HOME ?? os.homedir();
  const uid = process.getuid?.() ?? 0;
  const pathInputs = { platform, env, uid, home };
  const paths = resolvePaths(pathInputs);
  const searchPath = env.PATH ?? '';
  const [podman, docker, used] = await Promise.all([findExecutable('podman', searchPath), findExecutable('docker', searchPath), engineInUse(env)]);
  const binary = used === null ? null : used.engine === 'podman' ? podman : docker;
  const container: ContainerProbe | null =
    used === null || binary === null ? null : await probeContainer(used.engine, { run: runSubprocess, binary, env: stringEnv(env), owner: ownerLabel(uid, paths.stateDir) });
  const daemon: DaemonProbe = await getStatus(env).then((status) => ({ status }), (error: unknown) => ({ error }));
  const needed = connectionNeeded(env, platform);
  const connection = await probeConnection(env, home, podman);
  const ssh = 'connection' in connection ? await sshTrue(connection.connection, paths) : null;
  const cwd = process.cwd();
  const readable = platform === 'darwin' && 'status' in daemon ? await checkReadable(cwd, env).catch((error: unknown) => ({ error })) : null;
  let autoStart = true;
  try {
    autoStart = !envFlag(env, 'SANDBOXD_NO_AUTOSTART');
  } catch {
    // an unreadable value is reported by the command that reads it
  }
  return [
    checkNode(process.versions.node),
    checkSocketPath(paths, platform),
    await checkDirectories(paths, uid),
    checkDaemon(daemon, autoStart, paths.socketPath),
    checkOtherDaemons(otherDaemonWarnings(await findOtherDaemons(pathInputs, paths)), otherLayoutSockets(pathInputs, paths)),
    ...checkEngines({ podman, docker }, used),
    checkContainer(used?.engine ?? null, container, platform),
    checkConnection(connection, needed),
    checkMachineSsh(ssh, 'connection' in connection ? connection.connection.name : '', needed),
    checkAgent(await inspectAgentSocket(env.SSH_AUTH_SOCK)),
    checkPrivacy({ platform, cwd, home, answer: readable }),
    ...checkDockerEngines(daemon),
    checkService(await serviceState(platform)),
  ];
}

export function formatChecks(checks: readonly CheckResult[]): string {
  return checks
    .map((check) => `${MARKS[check.state]} ${check.name}: ${check.detail}${check.remedy === null ? '' : `\n    ${check.remedy}`}`)
    .join('\n');
}

export function registerDoctorCommand(program: Command): void {
  program
    .command('doctor')
    .description('check everything sandboxd depends on, one line each with ✓/✗ and a remedy; exit 1 when any fails')
    .option('--json', 'print JSON')
    .action(async (flags: { json?: boolean }) => {
      await runAction(flags.json === true, async () => {
        const checks = await runChecks(process.env);
        const healthy = checks.every((check) => check.state !== 'fail');
        if (flags.json === true) printJson({ ok: healthy, checks });
        else process.stdout.write(`${formatChecks(checks)}\n`);
        return healthy ? 0 : 1;
      });
    });
}
