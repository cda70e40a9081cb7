import os from 'node:os';
import { SandboxdError } from '../../shared/errors.js';
import { AGENT_NOT_FORWARDED } from '../../shared/agent-warning.js';
import { applyPlan, type AppliedPlan } from '../apply-plan.js';
import type { ConnectionOptions } from '../connection.js';
import { acquireSessionWhile, type Session } from '../session.js';
import type { Plan } from '../../shared/contracts/plan.js';
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
  /**
   * The host socket of llxprt's credential proxy, carried into the same session as the agent. A
   * function is called only once sandboxd is going to be asked (not for an opt-out or
   * `sandbox-exec`): it may start the proxy, which must be listening when the session is made.
   * Its failure leaves the socket to llxprt, whose own step then meets the same failure.
   */
  credentialSocket?: string | (() => Promise<string | undefined>);
  /** Default: warnings to stderr as `sandboxd: …`, debug lines nowhere. */
  log?: AdapterLog;
  /** Hosts whose https credentials the sandbox's git may ask the host for (default: SANDBOXD_GIT_CREDENTIALS). */
  gitCredentials?: string[];
}

/** What sandboxd carries for this launch; whatever it does not carry, llxprt's own steps do. */
export interface Forwarded {
  /** The container's SSH_AUTH_SOCK is sandboxd's: llxprt's own agent step must not run. */
  sshAgent: boolean;
  /** The path to give the container as LLXPRT_CREDENTIAL_SOCKET, or undefined: llxprt's own bridge carries it. */
  credentialSocket: string | undefined;
}

/** The name the credential proxy's socket has in the session: `/run/sandboxd/sockets/credential-proxy/`. */
export const CREDENTIAL_SOCKET_NAME = 'credential-proxy';

const NOTHING: Forwarded = { sshAgent: false, credentialSocket: undefined };

const STDERR_LOG: AdapterLog = {
  warn: (message) => {
    process.stderr.write(`sandboxd: ${message}\n`);
  },
  debug: () => undefined,
};

/** One container launch: its session and what sandboxd carries for it. */
interface Launch {
  session: Session;
  forwarded: Forwarded;
}

/**
 * llxprt changes one `args` array in place from its first step to its spawn, so that array is the
 * launch's handle: a second call for it, or a release, finds the session by it.
 */
const launches = new WeakMap<readonly string[], Launch>();

function asFallback(error: unknown): Fallback {
  if (error instanceof SandboxdError) return { code: error.code, reason: error.message, remedy: error.remedy };
  return { code: 'INTERNAL', reason: `sandboxd failed unexpectedly: ${error instanceof Error ? error.message : String(error)}`, remedy: null };
}

function report(log: AdapterLog, fallback: Fallback): void {
  const line = `not used, llxprt forwards the agent and the credential proxy itself: ${describeFallback(fallback)}`;
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

/** The credential socket's path in the container, or undefined with the reason said at debug level. */
function credentialCarried(session: Session, asked: boolean, log: AdapterLog): string | undefined {
  if (!asked) return undefined;
  const socket = session.sockets.find((entry) => entry.name === CREDENTIAL_SOCKET_NAME);
  if (socket?.status === 'forwarded') return socket.socket;
  log.debug(`the credential proxy is left to llxprt: sandboxd does not carry it: ${socket?.status === 'skipped' ? socket.reason : 'the daemon said nothing of it'}`);
  return undefined;
}

/**
 * The plan's warning for a credential socket the daemon skipped: llxprt carries that socket
 * itself, so it is no news to its user (the debug line says why).
 */
function skippedSocketWarning(session: Session): string | null {
  const socket = session.sockets.find((entry) => entry.name === CREDENTIAL_SOCKET_NAME);
  return socket?.status === 'skipped' ? `socket ${socket.name} is not forwarded: ${socket.reason}` : null;
}

/** The proxy's host socket, once it listens; undefined (said at debug level) when it cannot be had. */
async function credentialHostSocket(option: ForwardOptions['credentialSocket'], log: AdapterLog): Promise<string | undefined> {
  try {
    const socket = typeof option === 'function' ? await option() : option;
    return socket === '' ? undefined : socket;
  } catch (error) {
    log.debug(`the credential proxy is left to llxprt: it did not start: ${error instanceof Error ? error.message : String(error)}`);
    return undefined;
  }
}

/**
 * The plan's warnings, each once, as llxprt's user must see them; its notices (what sandboxd set
 * that needs no action), why the agent was not forwarded when llxprt's own step carries it, and a
 * credential socket llxprt carries itself are for debugging only.
 */
function sayPlan(plan: Session['plan'], forwarded: Forwarded, leftToLlxprt: string | null, log: AdapterLog): void {
  for (const warning of new Set(plan.warnings)) {
    if (warning === leftToLlxprt) continue;
    if (!forwarded.sshAgent && warning.startsWith(AGENT_NOT_FORWARDED)) log.debug(warning);
    else log.warn(warning);
  }
  for (const notice of new Set(plan.notices)) log.debug(notice);
}

/** A plan as the daemon writes one for llxprt (mounts, variables, labels, a cid file), for rehearse. */
const SAMPLE_PLAN: Pick<Plan, 'args' | 'spawnEnv' | 'globalArgs'> = {
  args: ['-v', '/a:/run/a:ro,z', '-e', 'A=1', '--label', 'a=b', '--cidfile', '/c'],
  spawnEnv: {},
  globalArgs: [],
};

/**
 * The merge the launch runs on the answer, run once on a sample plan while the daemon works on
 * the acquire: the runtime compiles it then instead of after the answer. Pure, and what it would
 * find wrong with llxprt's arguments the real merge finds again and reports.
 */
function rehearseMerge(args: readonly string[], env: NodeJS.ProcessEnv): void {
  try {
    fitsLlxprtSpawn(applyPlan(args, SAMPLE_PLAN), env, process.platform);
  } catch {
    // Reported by the real merge.
  }
}

async function startLaunch(config: LlxprtSandboxConfig, args: string[], options: ForwardOptions, log: AdapterLog): Promise<Launch | Fallback> {
  if (config.command !== 'docker' && config.command !== 'podman') {
    return { code: NOT_A_CONTAINER, reason: `llxprt's sandbox runs with ${config.command}, not a container engine`, remedy: null };
  }
  const env = options.env ?? process.env;
  const settings = llxprtSettings(env, { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0, home: env.HOME ?? os.homedir() }, options.setUidGid);
  if (settings.optedOut) return { code: OPTED_OUT, reason: `LLXPRT_SANDBOXD is ${env.LLXPRT_SANDBOXD ?? ''}`, remedy: null };
  const credential = await credentialHostSocket(options.credentialSocket, log);
  let session: Session | null = null;
  try {
    session = await acquireSessionWhile({
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
      sockets: credential === undefined ? undefined : [{ name: CREDENTIAL_SOCKET_NAME, hostPath: credential }],
      gitCredentials: options.gitCredentials,
    }, () => {
      rehearseMerge(args, env);
    });
    const applied = applyPlan(args, session.plan);
    const misfit = fitsLlxprtSpawn(applied, env, process.platform);
    if (misfit !== null) {
      await releaseQuietly(session);
      return misfit;
    }
    args.splice(applied.inserted.at, 0, ...applied.inserted.added);
    const forwarded: Forwarded = { sshAgent: agentForwarded(session, applied), credentialSocket: credentialCarried(session, credential !== undefined, log) };
    const leftToLlxprt = forwarded.credentialSocket === undefined ? skippedSocketWarning(session) : null;
    sayPlan(session.plan, forwarded, leftToLlxprt, log);
    const { ssh } = session.info;
    if (!forwarded.sshAgent) log.debug(`the agent is left to llxprt: ${ssh.status === 'skipped' ? ssh.reason : "llxprt's arguments set SSH_AUTH_SOCK"}`);
    return { session, forwarded };
  } catch (error) {
    if (session !== null) await releaseQuietly(session);
    return asFallback(error);
  }
}

/**
 * llxprt's launch (sandbox-exec.ts, before its agent step): one sandboxd session carries the SSH
 * agent and llxprt's credential proxy into the container and gives it git's identity and config
 * and the repository's protections; its plan is merged into `args` in place, llxprt's own
 * arguments winning. Resolves to what sandboxd carries: llxprt's own agent step runs only when
 * `sshAgent` is false, its own credential bridge only when `credentialSocket` is undefined. Where
 * sandboxd is not used, both are (the line it prints says why). Never rejects. The session ends
 * when this process does: the daemon watches its pid, so nothing needs releasing.
 */
export async function forwardThroughSandboxd(config: LlxprtSandboxConfig, args: string[], options: ForwardOptions = {}): Promise<Forwarded> {
  const running = launches.get(args);
  if (running !== undefined) return running.forwarded;
  const log = options.log ?? STDERR_LOG;
  const launch = await startLaunch(config, args, options, log);
  if (isFallback(launch)) {
    report(log, launch);
    return NOTHING;
  }
  launches.set(args, launch);
  return launch.forwarded;
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
