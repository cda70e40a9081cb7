import { clip, randomId } from '../os/text.js';
import type { RunSubprocess, SubprocessResult } from '../os/subprocess.js';
import { fingerprintOf } from './agent-keys.js';
import { RUNTIME_START_TRIES, runtimeStartFailed } from './runtime-start.js';

/** A probe that takes longer is cut off with a warning: the agent or the VM is not answering. */
export const PROBE_TIMEOUT_MS = 8_000;
const PROBE_SOCKET = '/run/sandboxd/probe.sock';
/** One process, a few KiB: the limits only bound what a broken engine could make of it. */
const PROBE_LIMITS = ['--pids-limit', '4', '--memory', '16m'];

/** A user in the engine's VM, as `docker run --user` takes it. */
export interface VmUser {
  uid: number;
  gid: number;
}

export const VM_ROOT: VmUser = { uid: 0, gid: 0 };

export interface ProbeOutcome {
  /**
   * `verified`: the socket answered with its keys; `missing`: the VM has no such socket;
   * `unusable`: it is there but no agent answers on it; `denied`: it is there but neither root
   * (without capabilities) nor its owner may connect; `unverified`: the probe could not tell.
   */
  state: 'verified' | 'missing' | 'unusable' | 'denied' | 'unverified';
  detail: string;
  /** Fingerprints the VM's agent holds (verified only). */
  keys: string[];
  /**
   * Who may connect to the socket: root where it is root's (Docker Desktop: root:root 0660), its
   * owner where that is another user (Colima: the VM's user). The relay runs as this user.
   */
  user: VmUser;
}

/** What the relay printed of a socket it may not connect to: `owner <uid> <gid> <mode>`. */
interface SocketOwner extends VmUser {
  mode: string;
}

/**
 * sandboxd's own image, never a session's (DESIGN §9: the answer decides for every session of the
 * engine): the relay binary in the image, asked to list the socket's identities, and its labels.
 */
export interface ProbeImage {
  /** `docker import`s the image on first use; resolves to its tag. */
  tag(): Promise<string>;
  entrypoint: string;
  labels: readonly string[];
}

/**
 * `sandboxd-relay identities` as `user` (root first: Docker Desktop's socket is root:root 0660),
 * with nothing else: no network, no capabilities, read-only, bounded, and never a pull.
 */
export function probeArgs(name: string, socket: string, image: string, helper: Omit<ProbeImage, 'tag'>, user: VmUser = VM_ROOT): string[] {
  return [
    'run', '--rm', '--name', name, '--pull', 'never', '--network', 'none', '--cap-drop', 'ALL', '--read-only',
    '--security-opt', 'no-new-privileges', ...PROBE_LIMITS, '--user', `${String(user.uid)}:${String(user.gid)}`, ...helper.labels,
    '--mount', `type=bind,source=${socket},target=${PROBE_SOCKET},readonly`,
    '--entrypoint', helper.entrypoint, image, 'identities', PROBE_SOCKET,
  ];
}

function lastLine(text: string): string {
  // The docker CLI ends a failed run with "Run 'docker run --help' for more information", which
  // says nothing of the cause: the line before it does.
  const lines = text.trim().split('\n').filter((line) => line.trim() !== '' && !/^Run '.*--help' for more information/.test(line.trim()));
  return clip(lines.at(-1) ?? '');
}

/** The key blobs `sandboxd-relay identities` printed (`key <hex>`), as `ssh-add -l` fingerprints. */
function keysListed(stdout: string): string[] {
  return [...stdout.matchAll(/^key ([0-9a-f]+)$/gm)].map((match) => fingerprintOf(Buffer.from(match[1] ?? '', 'hex')));
}

/** The socket's owner and mode, from the relay's `owner <uid> <gid> <mode>` line (exit 5). */
export function ownerListed(stdout: string): SocketOwner | null {
  const match = /^owner (\d+) (\d+) ([0-7]{4})$/m.exec(stdout);
  return match === null ? null : { uid: Number(match[1]), gid: Number(match[2]), mode: match[3] ?? '' };
}

/** Who the probe ran as, for a message. */
function named(user: VmUser): string {
  return user.uid === 0 ? 'root without capabilities' : `its owner (uid ${String(user.uid)})`;
}

/**
 * What `docker run … sandboxd-relay identities` said about the socket: the relay's exit codes
 * (2 nothing answers, 3 not an agent, 4 no answer in time, 5 permission denied) and docker's own
 * 125. Nothing of a session's image runs, so docker's "bind source path does not exist" is
 * docker's. `user` is who the probe ran as.
 */
export function interpretProbe(result: SubprocessResult, socket: string, timeoutMs: number, user: VmUser = VM_ROOT): ProbeOutcome {
  const none = { keys: [], user };
  if (result.exitCode === 0) {
    const keys = keysListed(result.stdout);
    return { state: 'verified', detail: keys.length === 0 ? `the agent at ${socket} holds no keys` : `the agent at ${socket} lists ${keys.length} key(s)`, keys, user };
  }
  if (result.exitCode === null) return { state: 'unverified', detail: `the probe of ${socket} did not finish within ${timeoutMs} ms and was cut off`, ...none };
  const stderr = result.stderr;
  if (result.exitCode === 125 && /bind source path does not exist|no such file or directory/i.test(stderr) && stderr.includes(socket)) {
    return { state: 'missing', detail: `the engine's VM has no ${socket}`, ...none };
  }
  if (result.exitCode === 2 || result.exitCode === 3) return { state: 'unusable', detail: `nothing answers on ${socket} in the engine's VM: ${lastLine(stderr)}`, ...none };
  if (result.exitCode === 4) return { state: 'unverified', detail: `the agent at ${socket} did not answer within 5 s`, ...none };
  if (result.exitCode === 5) {
    const owner = ownerListed(result.stdout);
    const shape = owner === null ? '' : ` (owner uid ${String(owner.uid)}, gid ${String(owner.gid)}, mode ${owner.mode})`;
    return { state: 'denied', detail: `permission denied: ${named(user)} may not connect to ${socket} in the engine's VM${shape}`, ...none };
  }
  return { state: 'unverified', detail: `the probe of ${socket} failed: ${lastLine(stderr) || `exit ${result.exitCode}`}`, ...none };
}

export interface ProbeDeps {
  run: RunSubprocess;
  docker: string;
  env: Record<string, string>;
  image: ProbeImage;
  timeoutMs?: number;
}

/** How long the docker CLI may take to exit once its container was removed. */
const REMOVE_GRACE_MS = 10_000;

/**
 * Runs the probe container: as root, and once more as the socket's owner when root may not connect
 * and the socket is another user's. One that hangs (the engine, not the relay, which gives up by
 * itself) is cut off by removing its container. Without sandboxd's image (no relay built for the
 * engine's architecture) the socket cannot be verified.
 */
export async function probeBuiltinSocket(socket: string, deps: ProbeDeps): Promise<ProbeOutcome> {
  const timeoutMs = deps.timeoutMs ?? PROBE_TIMEOUT_MS;
  let image: string;
  try {
    image = await deps.image.tag();
  } catch (error) {
    return { state: 'unverified', detail: `sandboxd cannot probe ${socket}: ${error instanceof Error ? error.message : String(error)}`, keys: [], user: VM_ROOT };
  }
  const asRoot = await probeOnce(socket, image, deps, timeoutMs, VM_ROOT);
  // Colima's socket is sshd's forwarded one, the VM user's (0755 before OpenSSH 10.1, 0600 from
  // it): root without capabilities may not connect, its owner may. Asked again as that owner.
  const owner = asRoot.outcome.state === 'denied' ? ownerListed(asRoot.stdout) : null;
  if (owner === null || owner.uid === 0) return asRoot.outcome;
  return (await probeOnce(socket, image, deps, timeoutMs, { uid: owner.uid, gid: owner.gid })).outcome;
}


/**
 * A probe container the engine's runtime failed to start (runtimeStartFailed) says nothing about
 * the socket, so the probe runs again, RUNTIME_START_TRIES in all; the last failure is the outcome.
 */
async function probeOnce(socket: string, image: string, deps: ProbeDeps, timeoutMs: number, user: VmUser): Promise<{ outcome: ProbeOutcome; stdout: string }> {
  let last = await probeRun(socket, image, deps, timeoutMs, user);
  for (let tries = 1; last.retry && tries < RUNTIME_START_TRIES; tries += 1) last = await probeRun(socket, image, deps, timeoutMs, user);
  return last;
}

async function probeRun(socket: string, image: string, deps: ProbeDeps, timeoutMs: number, user: VmUser): Promise<{ outcome: ProbeOutcome; stdout: string; retry: boolean }> {
  const name = randomId('sandboxd-probe');
  const removal = { started: false };
  const timer = setTimeout(() => {
    removal.started = true;
    void deps.run(deps.docker, ['rm', '-f', name], { env: deps.env, timeoutMs: REMOVE_GRACE_MS }).catch(() => undefined);
  }, timeoutMs);
  try {
    const result = await deps.run(deps.docker, probeArgs(name, socket, image, deps.image, user), { env: deps.env, timeoutMs: timeoutMs + REMOVE_GRACE_MS });
    const outcome = interpretProbe(removal.started ? { ...result, exitCode: null } : result, socket, timeoutMs, user);
    return { outcome, stdout: result.stdout, retry: !removal.started && runtimeStartFailed(result) };
  } finally {
    clearTimeout(timer);
  }
}
