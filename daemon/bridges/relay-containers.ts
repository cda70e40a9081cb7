import { SandboxdError } from '../../shared/errors.js';
import { clip } from '../os/text.js';
import type { RunSubprocess } from '../os/subprocess.js';
import { RUNTIME_START_TRIES, runtimeStartFailed } from '../engines/runtime-start.js';
import { helperLabels } from './helper-records.js';
import { RELAY_BINARY_IN_IMAGE } from './relay-image.js';

/*
 * What the relay containers in a Docker engine's VM have in common (docs/engines.md): sandboxd's
 * own image and binary, no network, no capabilities, a read-only root, no new privileges, bounded
 * pids and memory; the engine CLI run with the session's docker and variables; the relay's ready
 * and status lines (sandboxd-relay.c).
 */

const COMMAND_TIMEOUT_MS = 30_000;
const READY_TIMEOUT_MS = 10_000;
const READY_POLL_MS = 100;
const READY_LINE = 'sandboxd-relay ready';
const STATUS_LINE = /^sandboxd-relay status open=(\d+) refused=(\d+) rebound=(\d+)$/;

/** How sandboxd reaches one engine: the session's docker CLI and its variables. */
export interface RelayEngine {
  run: RunSubprocess;
  docker: string;
  env: Record<string, string>;
}

export function docker(engine: RelayEngine, args: string[]) {
  return engine.run(engine.docker, args, { env: engine.env, timeoutMs: COMMAND_TIMEOUT_MS });
}

/**
 * `docker run --detach` of relay container `name`: a start the engine's runtime failed
 * (runtimeStartFailed) is made again, RUNTIME_START_TRIES in all, each after the container the
 * failed one left created is removed.
 */
export async function startRelay(engine: RelayEngine, name: string, args: string[]) {
  let last = await docker(engine, args);
  for (let tries = 1; runtimeStartFailed(last) && tries < RUNTIME_START_TRIES; tries += 1) {
    await docker(engine, ['rm', '--force', name]);
    last = await docker(engine, args);
  }
  return last;
}

/** The hardening every relay container runs with; `pids` bounds it and its children. */
export function hardenedRelay(name: string, owner: string, pids: number, memory: string): string[] {
  return [
    'run', '--detach', '--name', name, ...helperLabels(owner, 'relay'), '--network', 'none', '--cap-drop', 'ALL', '--read-only',
    '--security-opt', 'no-new-privileges', '--pids-limit', String(pids), '--memory', memory, '--pull', 'never',
  ];
}

/** `serve UPSTREAM LISTEN MAX RATE MODE` of the relay binary in sandboxd's image. */
export function relayCommand(image: string, upstream: string, listen: string, max: number, rate: number, mode: '600' | '666'): string[] {
  return ['--entrypoint', RELAY_BINARY_IN_IMAGE, image, 'serve', upstream, listen, String(max), String(rate), mode];
}

/** A tmpfs volume of 64 KiB for one socket, owned by `uid:gid` with `mode`. */
export function relayVolumeArgs(name: string, owner: string, uid: number, gid: number, mode: '0700' | '0711'): string[] {
  return ['volume', 'create', '--driver', 'local', '--opt', 'type=tmpfs', '--opt', 'device=tmpfs', '--opt', `o=uid=${uid},gid=${gid},mode=${mode},size=64k,nr_inodes=16`, ...helperLabels(owner, 'relay'), name];
}

/** The last line a command printed on stderr, for a message. */
export function lastLine(stderr: string): string {
  return clip(stderr.trim().split('\n').filter((line) => line !== '').at(-1) ?? '');
}

export function relayFailure(what: string, stderr: string, reason: string | null = null): SandboxdError {
  const detail = lastLine(stderr);
  return new SandboxdError('RELAY_CONTAINER_FAILED', `${what}${detail === '' ? '' : `: ${detail}`}${reason === null ? '' : ` (${reason})`}`);
}

/**
 * Why the relay could not reach the engine's agent socket (`upstream` in the VM, mounted into the
 * relay), from its `connect <path>: <strerror>` line: the socket's owner and mode decide who may
 * connect, and they differ by engine.
 */
export function upstreamReason(line: string, upstream: string): string | null {
  if (!line.startsWith('sandboxd-relay: connect ')) return null;
  if (line.endsWith('Permission denied')) {
    return `permission denied: the engine's agent socket ${upstream} is not writable by the hub's user (root without capabilities, or the socket's owner as the probe found it)`;
  }
  if (line.endsWith('Connection refused') || line.endsWith('No such file or directory')) return `no agent listens at ${upstream} in the engine's VM`;
  return null;
}

/** The relay prints its ready line once it listens; `docker run -d` returns before that. */
export async function awaitReadyLine(engine: RelayEngine, name: string, upstream: string, sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))): Promise<void> {
  // Monotonic: a wall clock stepped meanwhile would end the wait at once or make it endless.
  const deadline = performance.now() + READY_TIMEOUT_MS;
  for (;;) {
    const logs = await docker(engine, ['logs', name]);
    if (logs.stdout.includes(READY_LINE)) return;
    if (logs.stderr.includes('sandboxd-relay:') || performance.now() > deadline) {
      throw relayFailure(`relay container ${name} did not become ready`, logs.stderr, upstreamReason(lastLine(logs.stderr), upstream));
    }
    await sleep(READY_POLL_MS);
  }
}

/** What a relay's last status line said (sandboxd-relay.c prints one a second while it changes). */
export interface RelayStatus {
  open: number;
  refused: number;
  rebound: number;
  /** Its last line on stderr, if any (a socket it bound again, a failed upstream). */
  said: string | null;
}

export function parseRelayStatus(stdout: string, stderr: string): RelayStatus | null {
  const line = stdout.split('\n').reverse().map((text) => STATUS_LINE.exec(text.trim())).find((match) => match !== null);
  if (line === undefined) return null;
  const said = lastLine(stderr);
  return { open: Number(line[1]), refused: Number(line[2]), rebound: Number(line[3]), said: said === '' ? null : said };
}

/** A relay's status now, from its last lines; null when it says none (yet) or the engine does not answer. */
export async function relayStatus(engine: RelayEngine, name: string): Promise<RelayStatus | null> {
  const logs = await docker(engine, ['logs', '--tail', '20', name]).catch(() => null);
  return logs === null || logs.exitCode !== 0 ? null : parseRelayStatus(logs.stdout, logs.stderr);
}
