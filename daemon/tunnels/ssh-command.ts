import path from 'node:path';
import { SandboxdError } from '../../shared/errors.js';
import { isLoopback, type PodmanConnection } from '../podman/connections.js';

export const READY_MARKER = 'sandboxd-ready';
/** Sent on stdin by a deliberate halt, so the remote side also removes the tunnel directory. */
export const HALT_WORD = 'halt';
/** How long the remote side waits for sshd to bind the forwarded socket (polls of 20 ms). */
const BIND_WAIT_POLLS = 250;

/** Single-quotes for a POSIX shell; every value is daemon-generated, this is defence in depth. */
export function shQuote(value: string): string {
  return `'${value.replaceAll("'", `'\\''`)}'`;
}

export interface TunnelLayout {
  /** Per-tunnel directory in the VM, mounted by containers. */
  dir: string;
  /** This generation's socket name inside `dir`. */
  generationName: string;
  /** Where sshd binds it: a fresh name beside `dir`'s parent, so nothing stale is ever in the way. */
  bindPath: string;
}

/** A fresh, never-reused name per generation: sshd refuses to bind over an existing file. */
export function tunnelLayout(vmRoot: string, tunnelHash: string, generation: number, nonce: string): TunnelLayout {
  const generationName = `a-${generation}-${nonce}.sock`;
  return {
    dir: path.posix.join(vmRoot, tunnelHash),
    generationName,
    bindPath: `${vmRoot}.${tunnelHash}.${generationName}`,
  };
}

/**
 * Runs over the tunnel's own ssh connection, so readiness costs no extra login (DESIGN §6): waits
 * for sshd's bind, moves the socket into the 0711 tunnel dir, makes it usable by any container
 * user (0666), atomically repoints `agent.sock`, removes older generations and prints the ready
 * line with the VM's SELinux mode. It then blocks on stdin; when ssh goes away (halt, crash, or
 * the daemon dying) stdin closes and it removes this generation's socket. The directory itself
 * stays unless the daemon said `halt`: running containers bind-mount that very inode, and a
 * re-created directory would be invisible to them.
 */
export function remoteScript(layout: TunnelLayout): string {
  const { dir, generationName, bindPath } = layout;
  return [
    `d=${shQuote(dir)}; g=${shQuote(generationName)}; b=${shQuote(bindPath)}`,
    'umask 022; mkdir -p "$d" && chmod 711 "${d%/*}" "$d" || { echo "sandboxd-error cannot create $d" >&2; exit 3; }',
    `i=0; while [ ! -S "$b" ]; do i=$((i+1)); [ $i -gt ${BIND_WAIT_POLLS} ] && { echo "sandboxd-error socket $b never appeared" >&2; exit 4; }; sleep 0.02; done`,
    'mv -f "$b" "$d/$g" && chmod 666 "$d/$g" && ln -sfn "$g" "$d/.agent.sock.new" && mv -f "$d/.agent.sock.new" "$d/agent.sock" || { echo "sandboxd-error cannot publish $d/$g" >&2; exit 5; }',
    'for f in "$d"/a-*.sock; do [ "$f" = "$d/$g" ] || rm -f "$f"; done',
    `echo "${READY_MARKER} $(getenforce 2>/dev/null || echo none)"`,
    `c=''; read -r c || true`,
    'rm -f "$d/$g"; [ "$(readlink "$d/agent.sock")" = "$g" ] && rm -f "$d/agent.sock"',
    `[ "$c" = ${HALT_WORD} ] && rmdir "$d" 2>/dev/null`,
    'exit 0',
  ].join('\n');
}

export interface SshOptions {
  connection: PodmanConnection;
  agentSocket: string;
  layout: TunnelLayout;
  knownHostsPath: string;
  aliveIntervalSeconds: number;
  aliveCountMax: number;
  connectTimeoutSeconds: number;
}

/** argv for `ssh -R`; no shell anywhere on the host side (DESIGN §9). */
export function sshArgs(options: SshOptions): string[] {
  const { connection, layout } = options;
  const { target } = connection;
  const loopback = isLoopback(target.host);
  const args = [
    // A machine on loopback is ours alone: like `podman machine ssh`, skip user config and host keys.
    ...(loopback ? ['-F', '/dev/null', '-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null'] : ['-o', 'StrictHostKeyChecking=accept-new', '-o', `UserKnownHostsFile=${options.knownHostsPath}`]),
    '-o', 'BatchMode=yes',
    '-o', 'ExitOnForwardFailure=yes',
    '-o', `ServerAliveInterval=${options.aliveIntervalSeconds}`,
    '-o', `ServerAliveCountMax=${options.aliveCountMax}`,
    '-o', `ConnectTimeout=${options.connectTimeoutSeconds}`,
    '-o', 'ControlMaster=no',
    '-o', 'ControlPath=none',
    '-o', 'LogLevel=ERROR',
    '-T',
    '-p', String(target.port),
    ...(connection.identity === null ? [] : ['-i', connection.identity, '-o', 'IdentitiesOnly=yes']),
    '-R', `${layout.bindPath}:${options.agentSocket}`,
    '--',
    target.user === null ? target.host : `${target.user}@${target.host}`,
    remoteScript(layout),
  ];
  return args;
}

const AUTH_FAILED = /permission denied|too many authentication failures|no such identity|host key verification failed/i;
const UNREACHABLE = [/connection refused/i, /connection timed out/i, /no route to host/i, /could not resolve hostname/i, /network is unreachable/i, /connection closed by/i, /connection reset/i, /timeout, server .* not responding/i];

/** Turns ssh's exit and stderr into a stable code, keeping ssh's own line in the message. */
export function classifySshFailure(connection: string, stderr: string, exitCode: number | null): SandboxdError {
  const lines = stderr.split('\n').map((line) => line.trim()).filter((line) => line !== '');
  const last = lines.at(-1) ?? `ssh exited with code ${exitCode ?? 'unknown'}`;
  const refused = lines.find((line) => AUTH_FAILED.test(line));
  if (refused !== undefined) return new SandboxdError('TUNNEL_AUTH_FAILED', `ssh to connection ${connection} was refused: ${refused}`);
  if (lines.some((line) => UNREACHABLE.some((pattern) => pattern.test(line)))) {
    return new SandboxdError('TUNNEL_UNREACHABLE', `the machine behind connection ${connection} is unreachable: ${last}`);
  }
  return new SandboxdError('TUNNEL_FAILED', `the tunnel over connection ${connection} failed: ${last}`);
}

/** 0.5 s, 1 s, 2 s … capped, so a machine that is down is retried without hammering it. */
export function backoffMs(attempt: number, baseMs = 500, capMs = 8_000): number {
  return Math.min(capMs, baseMs * 2 ** Math.max(0, attempt));
}
