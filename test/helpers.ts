import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { execa } from 'execa';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const CLI = path.join(ROOT, 'dist/bin/sandboxd.js');

/** Undo actions run in reverse, even when the test failed. */
export class Cleanup {
  private readonly actions: (() => unknown)[] = [];

  add(action: () => unknown): void {
    this.actions.push(action);
  }

  async run(): Promise<void> {
    for (const action of this.actions.splice(0).reverse()) {
      try {
        await action();
      } catch {
        // keep cleaning the rest
      }
    }
  }
}

export interface SandboxEnv {
  HOME: string;
  SANDBOXD_RUNTIME_DIR: string;
  SANDBOXD_STATE_DIR: string;
  SANDBOXD_LOG_DIR: string;
  XDG_CONFIG_HOME: string;
  SSH_AUTH_SOCK: string;
}

export interface Sandbox {
  dir: string;
  home: string;
  env: SandboxEnv;
}

/** A private HOME and sandboxd dirs under a short /tmp path (socket paths stay well under 107 bytes). */
export function makeSandbox(cleanup: Cleanup): Sandbox {
  const dir = mkdtempSync('/tmp/sbx-');
  const home = path.join(dir, 'home');
  mkdirSync(home, { recursive: true });
  const env: SandboxEnv = {
    HOME: home,
    SANDBOXD_RUNTIME_DIR: path.join(dir, 'rt'),
    SANDBOXD_STATE_DIR: path.join(dir, 'state'),
    SANDBOXD_LOG_DIR: path.join(dir, 'log'),
    XDG_CONFIG_HOME: '',
    SSH_AUTH_SOCK: '',
  };
  cleanup.add(async () => {
    await stopDaemonIn(env);
    rmSync(dir, { recursive: true, force: true });
  });
  return { dir, home, env };
}

export function cliEnv(sandbox: Sandbox, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return { ...process.env, ...sandbox.env, ...extra };
}

/** Runs the CLI as a shell would; `cwd` defaults to the test file's own empty directory (test/lab/own-cwd.ts). */
export function cli(args: string[], env: NodeJS.ProcessEnv, timeout = 30_000, cwd?: string) {
  return execa(process.execPath, [CLI, ...args], { env, reject: false, timeout, extendEnv: false, ...(cwd === undefined ? {} : { cwd }) });
}

export async function waitFor<T>(probe: () => T | Promise<T>, what: string, timeoutMs = 15_000, intervalMs = 50): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== null && value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/**
 * Running, and not a zombie: an exited process whose parent does not reap it (pid 1 in some
 * containers does not) still passes `kill(pid, 0)`.
 */
export function pidAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${String(pid)}/stat`, 'utf8');
    const state = stat.charAt(stat.lastIndexOf(')') + 2);
    return state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}

/** The daemon's pid record lives beside the state its lock guards. */
export function daemonPid(env: { SANDBOXD_STATE_DIR: string }): number | null {
  try {
    const record = JSON.parse(readFileSync(path.join(env.SANDBOXD_STATE_DIR, 'daemon.pid'), 'utf8')) as { pid: number };
    return pidAlive(record.pid) ? record.pid : null;
  } catch {
    return null;
  }
}

/** Stops whatever daemon a test left in this sandbox: gracefully, then by force. */
async function stopDaemonIn(env: SandboxEnv): Promise<void> {
  const pid = daemonPid(env);
  if (pid === null) return;
  process.kill(pid, 'SIGTERM');
  try {
    await waitFor(() => !pidAlive(pid), `daemon ${pid} to stop`, 6_000);
  } catch {
    process.kill(pid, 'SIGKILL');
  }
}

export interface DaemonProcess {
  child: ChildProcess;
  pid: number;
  stderr: () => string;
}

/** `sandboxd daemon` in the foreground, resolved once it prints its listening line. */
export async function startDaemon(env: NodeJS.ProcessEnv, cleanup: Cleanup, args: string[] = []): Promise<DaemonProcess> {
  const child = spawn(process.execPath, [CLI, 'daemon', ...args], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  cleanup.add(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  await waitFor(() => stderr.includes('listening on') || child.exitCode !== null, 'daemon to listen');
  if (child.exitCode !== null) throw new Error(`daemon exited ${child.exitCode}: ${stderr}`);
  return { child, pid: child.pid ?? 0, stderr: () => stderr };
}

export function exitOf(child: ChildProcess, timeoutMs = 10_000): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  return new Promise((resolve, reject) => {
    if (child.exitCode !== null || child.signalCode !== null) {
      resolve({ code: child.exitCode, signal: child.signalCode });
      return;
    }
    const timer = setTimeout(() => {
      reject(new Error(`process ${child.pid ?? '?'} did not exit within ${timeoutMs} ms`));
    }, timeoutMs);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal });
    });
  });
}

export interface Agent {
  socket: string;
  fingerprint: string;
  keyPath: string;
}

/**
 * A real ssh-agent holding a fresh test key, killed by the cleanup. With `maxFiles` it runs under
 * that `ulimit -n`, as an agent started from a login with a low limit does: it serves that many
 * less ten connections at once and leaves the others waiting.
 */
export async function startAgent(dir: string, cleanup: Cleanup, name = 'agent', options: { maxFiles?: number } = {}): Promise<Agent> {
  const socket = path.join(dir, `${name}.sock`);
  const keyPath = path.join(dir, `${name}-key`);
  await execa('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', `sandboxd-test-${name}`, '-f', keyPath]);
  const agent =
    options.maxFiles === undefined
      ? spawn('ssh-agent', ['-D', '-a', socket], { stdio: 'ignore' })
      : spawn('sh', ['-c', `ulimit -n ${String(options.maxFiles)} && exec ssh-agent -D -a "$0"`, socket], { stdio: 'ignore' });
  cleanup.add(() => agent.kill('SIGKILL'));
  await waitFor(async () => (await execa('ssh-add', ['-l'], { env: { SSH_AUTH_SOCK: socket }, reject: false })).exitCode === 1, 'ssh-agent to answer');
  await execa('ssh-add', [keyPath], { env: { SSH_AUTH_SOCK: socket } });
  const fingerprint = (await execa('ssh-keygen', ['-lf', `${keyPath}.pub`])).stdout.split(' ')[1] ?? '';
  return { socket, fingerprint, keyPath };
}

/** pids of `sandboxd daemon` processes whose environment names this runtime dir. */
export function daemonsFor(runtimeDir: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (!cmdline.includes(CLI) || !cmdline.includes('daemon')) continue;
      const environ = readFileSync(`/proc/${entry}/environ`, 'utf8').split('\0');
      if (environ.includes(`SANDBOXD_RUNTIME_DIR=${runtimeDir}`)) found.push(Number(entry));
    } catch {
      // the process went away while we looked
    }
  }
  return found;
}
