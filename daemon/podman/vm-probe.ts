import type { ChildProcess } from 'node:child_process';
import { SandboxdError } from '../../shared/errors.js';
import { classifySshFailure, queryLoop, SEEN_MARKER, sshProbeArgs } from './ssh-command.js';
import type { PathKind } from './vm-queries.js';
import type { PodmanConnection } from './connections.js';

/** One login, a few stat-like tests: bounded well inside an acquire's budget. */
export const PROBE_TIMEOUT_MS = 10_000;
const CONNECT_TIMEOUT_SECONDS = 8;
const STDERR_KEEP_BYTES = 4_096;

export interface VmProbeDeps {
  spawnSsh(args: string[]): ChildProcess;
  knownHostsPath: string;
  timeoutMs?: number;
}

/**
 * Asks a VM what it finds at each path with one ssh login, for when no tunnel runs to ask over
 * (the agent is off). The remote command is the same fixed stub as a tunnel's; the loop and the
 * paths go on stdin, so no path reaches an argv in the VM.
 */
export function probeVm(connection: PodmanConnection, paths: readonly string[], deps: VmProbeDeps): Promise<Map<string, PathKind>> {
  const timeoutMs = deps.timeoutMs ?? PROBE_TIMEOUT_MS;
  const child = deps.spawnSsh(sshProbeArgs({ connection, knownHostsPath: deps.knownHostsPath, aliveIntervalSeconds: 5, aliveCountMax: 1, connectTimeoutSeconds: CONNECT_TIMEOUT_SECONDS }));
  return new Promise((resolve, reject) => {
    const answers = new Map<string, PathKind>();
    let stdout = '';
    let stderr = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new SandboxdError('TUNNEL_UNREACHABLE', `the VM behind connection ${connection.name} did not answer within ${timeoutMs} ms`));
    }, timeoutMs);
    timer.unref();
    child.stdout?.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr = (stderr + chunk.toString()).slice(-STDERR_KEEP_BYTES);
    });
    child.stdin?.on('error', () => undefined);
    child.once('error', (error: NodeJS.ErrnoException) => {
      stderr += error.code === 'ENOENT' ? 'ssh: command not found (install OpenSSH)' : error.message;
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      for (const line of stdout.split('\n')) {
        const [marker, id, kind] = line.trim().split(' ');
        const index = Number(id);
        const path = paths[index];
        if (marker === SEEN_MARKER && path !== undefined && (kind === 'd' || kind === 'f' || kind === '-')) answers.set(path, kind);
      }
      if (answers.size === paths.length) resolve(answers);
      else reject(classifySshFailure(connection.name, stderr, code));
    });
    child.stdin?.end([queryLoop(), ...paths.map((path, index) => `s ${String(index)} ${path}`), ''].join('\n'));
  });
}
