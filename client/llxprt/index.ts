import os from 'node:os';
import { SandboxdError } from '../../shared/errors.js';
import { applyPlan, type AppliedPlan } from '../apply-plan.js';
import type { ConnectionOptions } from '../connection.js';
import { acquireSession, type AcquireOptions, type Session } from '../session.js';
import { NOT_A_CONTAINER, OPTED_OUT, describeFallback, isFallback, isQuiet, type Fallback } from './fallback.js';
import { fitsLlxprtSpawn } from './spawn-fit.js';
import { llxprtSettings } from './settings.js';

export { CONNECTION_NOT_CARRIED, NOT_A_CONTAINER, OPTED_OUT, type Fallback, type FallbackCode } from './fallback.js';

/** llxprt's SandboxConfig, as far as the adapter reads it. */
export interface LlxprtSandboxConfig {
  /** `docker` or `podman`; anything else (`sandbox-exec`) is left to llxprt. */
  command: string;
  /** The image llxprt runs: a Docker Desktop-style engine's agent socket is verified with it. */
  image?: string;
}

/** Where the adapter's lines go. */
export interface AdapterLog {
  /** A line the user should see: a plan warning, or why sandboxd is not used. */
  warn(message: string): void;
  /** What only someone debugging needs: the user's own opt-outs, what llxprt carries itself. */
  debug(message: string): void;
}

export interface ForwardOptions extends ConnectionOptions {
  /** llxprt's SANDBOX_SET_UID_GID decision, shouldUseCurrentUserInSandbox() (else the variable is read). */
  setUidGid?: boolean;
  /** The directory llxprt mounts as the work tree (default process.cwd()). */
  cwd?: string;
  /** Default: warnings to stderr as `sandboxd: …`, debug lines nowhere. */
  log?: AdapterLog;
  /** Hosts whose https credentials the sandbox's git may ask the host for (default: SANDBOXD_GIT_CREDENTIALS). */
  gitCredentials?: string[];
}

/** The name the credential proxy's socket has in the session: `/run/sandboxd/sockets/credential-proxy/`. */
export const CREDENTIAL_SOCKET_NAME = 'credential-proxy';

const STDERR_LOG: AdapterLog = {
  warn: (message) => {
    process.stderr.write(`sandboxd: ${message}\n`);
  },
  debug: () => undefined,
};

/** One container launch: the session, and what of it the launch's argument list holds. */
interface Launch {
  session: Session;
  request: AcquireOptions;
  inserted: AppliedPlan['inserted'];
  sshForwarded: boolean;
  log: AdapterLog;
  /** Warnings already shown, so the credential step's second plan does not repeat them. */
  warned: Set<string>;
}

/**
 * llxprt changes one `args` array in place from its first step to its spawn, so that array is the
 * launch's handle: the credential step finds the agent step's session by it, and nothing has to
 * be threaded through llxprt's functions.
 */
const launches = new WeakMap<readonly string[], Launch>();

function asFallback(error: unknown): Fallback {
  if (error instanceof SandboxdError) return { code: error.code, reason: error.message, remedy: error.remedy };
  return { code: 'INTERNAL', reason: `sandboxd failed unexpectedly: ${error instanceof Error ? error.message : String(error)}`, remedy: null };
}

/** `left` names what llxprt does itself instead, e.g. `llxprt forwards the agent itself`. */
function report(log: AdapterLog, fallback: Fallback, left: string): void {
  const line = `${left}: ${describeFallback(fallback)}`;
  if (isQuiet(fallback.code)) log.debug(line);
  else log.warn(line);
}

async function releaseQuietly(session: Session): Promise<void> {
  await session.release().catch(() => undefined);
}

/** The container's SSH_AUTH_SOCK is sandboxd's: forwarded, and not already set by llxprt's arguments. */
function agentForwarded(session: Session, applied: AppliedPlan): boolean {
  return session.info.ssh.status === 'forwarded' && !applied.skipped.some((entry) => entry.kind === 'env' && entry.key === 'SSH_AUTH_SOCK');
}

function warnOnce(launch: Launch, warnings: readonly string[]): void {
  for (const warning of warnings) {
    if (launch.warned.has(warning)) continue;
    launch.warned.add(warning);
    launch.log.warn(warning);
  }
}

/** What the plan adds to `args`, or why llxprt's own path runs instead. */
function planFor(args: readonly string[], session: Session, env: NodeJS.ProcessEnv): AppliedPlan | Fallback {
  const applied = applyPlan(args, session.plan);
  return fitsLlxprtSpawn(applied, env, process.platform) ?? applied;
}

async function startLaunch(config: LlxprtSandboxConfig, args: string[], options: ForwardOptions, log: AdapterLog): Promise<Launch | Fallback> {
  if (config.command !== 'docker' && config.command !== 'podman') {
    return { code: NOT_A_CONTAINER, reason: `llxprt's sandbox runs with ${config.command}, not a container engine`, remedy: null };
  }
  const env = options.env ?? process.env;
  const settings = llxprtSettings(env, { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0, home: env.HOME ?? os.homedir() }, options.setUidGid);
  if (settings.optedOut) return { code: OPTED_OUT, reason: `LLXPRT_SANDBOXD is ${env.LLXPRT_SANDBOXD ?? ''}`, remedy: null };
  const request: AcquireOptions = {
    autoStart: options.autoStart,
    daemonCommand: options.daemonCommand,
    image: config.image === '' ? undefined : config.image,
    env,
    engine: config.command,
    cwd: options.cwd ?? process.cwd(),
    label: 'llxprt',
    sshAgent: settings.sshAgent,
    containerUser: settings.containerUser,
    // llxprt mounts the work tree itself, at the same path.
    workdir: false,
    gitCredentials: options.gitCredentials,
  };
  let session: Session | null = null;
  try {
    session = await acquireSession(request);
    const applied = planFor(args, session, env);
    if (isFallback(applied)) {
      await releaseQuietly(session);
      return applied;
    }
    args.splice(applied.inserted.at, 0, ...applied.inserted.added);
    const launch: Launch = { session, request, inserted: applied.inserted, sshForwarded: agentForwarded(session, applied), log, warned: new Set() };
    warnOnce(launch, session.plan.warnings);
    const { ssh } = session.info;
    if (!launch.sshForwarded) log.debug(`the agent is left to llxprt: ${ssh.status === 'skipped' ? ssh.reason : 'llxprt\'s arguments set SSH_AUTH_SOCK'}`);
    return launch;
  } catch (error) {
    if (session !== null) await releaseQuietly(session);
    return asFallback(error);
  }
}

/**
 * llxprt's agent step (sandbox-exec.ts, prepareContainerNetworkAndEnv), in place of its own
 * setupSshAgentForwarding: acquires a sandboxd session for this launch and merges its plan (the
 * agent, git's identity and config, the repository's protections) into `args` in place, with
 * llxprt's own arguments winning. Resolves true when the container's SSH_AUTH_SOCK is sandboxd's,
 * so llxprt skips its own agent step; false when llxprt's own step should run: sandboxd is not
 * used (the line it prints says why) or forwards no agent. Never rejects. The session ends when
 * this process does: the daemon watches its pid, so nothing needs releasing.
 */
export async function forwardSshAgent(config: LlxprtSandboxConfig, args: string[], options: ForwardOptions = {}): Promise<boolean> {
  const running = launches.get(args);
  if (running !== undefined) return running.sshForwarded;
  const log = options.log ?? STDERR_LOG;
  const launch = await startLaunch(config, args, options, log);
  if (isFallback(launch)) {
    report(log, launch, 'not used, llxprt forwards the agent itself');
    return false;
  }
  launches.set(args, launch);
  return launch.sshForwarded;
}

/** The second session's plan and the socket it carries, or why the launch keeps its first. */
function swapFor(without: readonly string[], launch: Launch, next: Session): { applied: AppliedPlan; socket: string } | string {
  const applied = planFor(without, next, launch.request.env ?? process.env);
  if (isFallback(applied)) return describeFallback(applied);
  const socket = next.sockets[0];
  if (socket?.status !== 'forwarded') return `sandboxd does not carry it: ${socket?.status === 'skipped' ? socket.reason : 'the daemon said nothing of it'}`;
  if (agentForwarded(next, applied) !== launch.sshForwarded) return 'the agent would no longer be forwarded as llxprt was told';
  return { applied, socket: socket.socket };
}

/**
 * llxprt's credential step (sandbox-containers.ts, setupCredentialProxy), once its proxy listens
 * on `hostSocket`: carries that socket into the container the way the agent is carried (a relay
 * on Linux, a tunnel into a Podman machine), whatever the container's user. Resolves to the path
 * to give the container as LLXPRT_CREDENTIAL_SOCKET, with `args` updated in place; undefined
 * when llxprt's own bridge must carry it (sandboxd is not used for this launch, or cannot bridge
 * it, as on Docker Desktop). Never rejects.
 *
 * The session is taken again with the socket and the first one given back: the socket exists only
 * now, after the agent step, and a session's sockets are fixed when it is acquired.
 */
export async function forwardCredentialSocket(args: string[], hostSocket: string): Promise<string | undefined> {
  const launch = launches.get(args);
  if (launch === undefined) return undefined;
  const { at, added } = launch.inserted;
  if (args.slice(at, at + added.length).join('\0') !== added.join('\0')) {
    launch.log.debug('the credential proxy is left to llxprt: its arguments moved since the agent step');
    return undefined;
  }
  const without = [...args.slice(0, at), ...args.slice(at + added.length)];
  let next: Session | null = null;
  try {
    next = await acquireSession({ ...launch.request, sockets: [{ name: CREDENTIAL_SOCKET_NAME, hostPath: hostSocket }] });
    const swap = swapFor(without, launch, next);
    if (typeof swap === 'string') {
      await releaseQuietly(next);
      launch.log.debug(`the credential proxy is left to llxprt: ${swap}`);
      return undefined;
    }
    args.splice(at, added.length);
    args.splice(swap.applied.inserted.at, 0, ...swap.applied.inserted.added);
    const first = launch.session;
    launch.session = next;
    launch.inserted = swap.applied.inserted;
    await releaseQuietly(first);
    warnOnce(launch, next.plan.warnings);
    return swap.socket;
  } catch (error) {
    if (next !== null) await releaseQuietly(next);
    report(launch.log, asFallback(error), 'the credential proxy is left to llxprt');
    return undefined;
  }
}

/**
 * Ends the session behind `args` now. Optional: the daemon ends it when this process exits, which
 * is when llxprt's container has ended.
 */
export async function releaseSandboxd(args: readonly string[]): Promise<void> {
  const launch = launches.get(args);
  if (launch === undefined) return;
  launches.delete(args);
  await launch.session.release();
}
