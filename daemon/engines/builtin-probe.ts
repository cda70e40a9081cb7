import { randomId } from '../ids.js';
import { clip } from '../clip.js';
import type { RunSubprocess, SubprocessResult } from '../subprocess.js';
import { fingerprintsInListing } from './agent-keys.js';

/** A probe that takes longer is cut off with a warning: the agent or the VM is not answering. */
export const PROBE_TIMEOUT_MS = 8_000;
const PROBE_SOCKET = '/run/sandboxd/probe.sock';

export interface ProbeOutcome {
  /**
   * `verified`: the socket answered with its keys; `missing`: the VM has no such socket;
   * `unusable`: it is there but no agent answers on it; `unverified`: the probe could not tell.
   */
  state: 'verified' | 'missing' | 'unusable' | 'unverified';
  detail: string;
  /** Fingerprints the VM's agent holds (verified only). */
  keys: string[];
}

/**
 * `ssh-add -l` in the session's own image, as root (the socket is root:root 0660), with nothing
 * else: no network, no capabilities, read-only, and never a pull.
 */
export function probeArgs(name: string, socket: string, image: string): string[] {
  return [
    'run', '--rm', '--name', name, '--pull', 'never', '--network', 'none', '--cap-drop', 'ALL', '--read-only',
    '--security-opt', 'no-new-privileges', '--user', '0:0', '--label', 'sandboxd.probe=1',
    '--mount', `type=bind,source=${socket},target=${PROBE_SOCKET}`, '--env', `SSH_AUTH_SOCK=${PROBE_SOCKET}`,
    '--entrypoint', 'ssh-add', image, '-l',
  ];
}

function lastLine(text: string): string {
  return clip(text.trim().split('\n').filter((line) => line.trim() !== '').at(-1) ?? '');
}

/** What `docker run … ssh-add -l` said about the socket (exit codes of docker run and ssh-add). */
export function interpretProbe(result: SubprocessResult, socket: string, image: string, timeoutMs: number): ProbeOutcome {
  const none = { keys: [] };
  if (result.exitCode === 0) {
    const keys = fingerprintsInListing(result.stdout);
    return { state: 'verified', detail: `the agent at ${socket} lists ${keys.length} key(s)`, keys };
  }
  if (result.exitCode === 1) return { state: 'verified', detail: `the agent at ${socket} holds no keys`, ...none };
  if (result.exitCode === null) return { state: 'unverified', detail: `the probe of ${socket} did not finish within ${timeoutMs} ms and was cut off`, ...none };
  const stderr = result.stderr;
  if (/bind source path does not exist|no such file or directory/i.test(stderr) && stderr.includes(socket)) {
    return { state: 'missing', detail: `the engine's VM has no ${socket}`, ...none };
  }
  if (/no such image|pull access denied|image .* not (found|known)|unable to find image/i.test(stderr)) {
    return { state: 'unverified', detail: `image ${image} is not present in the engine (sandboxd never pulls for a probe)`, ...none };
  }
  if (result.exitCode === 126 || result.exitCode === 127) {
    return { state: 'unverified', detail: `image ${image} has no ssh-add to probe the agent with`, ...none };
  }
  if (result.exitCode === 2) return { state: 'unusable', detail: `nothing answers on ${socket} in the engine's VM: ${lastLine(stderr)}`, ...none };
  return { state: 'unverified', detail: `the probe of ${socket} failed: ${lastLine(stderr) || `exit ${result.exitCode}`}`, ...none };
}

export interface ProbeDeps {
  run: RunSubprocess;
  docker: string;
  env: Record<string, string>;
  timeoutMs?: number;
}

/** How long the docker CLI may take to exit once its container was removed. */
const REMOVE_GRACE_MS = 10_000;

/**
 * Runs the probe container once. One that hangs is cut off by removing its container: killing the
 * docker CLI is not enough, since `ssh-add` is PID 1 there and ignores the SIGTERM it forwards.
 */
export async function probeBuiltinSocket(socket: string, image: string, deps: ProbeDeps): Promise<ProbeOutcome> {
  const timeoutMs = deps.timeoutMs ?? PROBE_TIMEOUT_MS;
  const name = randomId('sandboxd-probe');
  const removal = { started: false };
  const timer = setTimeout(() => {
    removal.started = true;
    void deps.run(deps.docker, ['rm', '-f', name], { env: deps.env, timeoutMs: REMOVE_GRACE_MS }).catch(() => undefined);
  }, timeoutMs);
  try {
    const result = await deps.run(deps.docker, probeArgs(name, socket, image), { env: deps.env, timeoutMs: timeoutMs + REMOVE_GRACE_MS });
    return interpretProbe(removal.started ? { ...result, exitCode: null } : result, socket, image, timeoutMs);
  } finally {
    clearTimeout(timer);
  }
}
