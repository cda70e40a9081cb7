import { spawn } from 'node:child_process';
import { mkdtempSync, existsSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { inject } from 'vitest';
import { Cleanup, waitFor } from '../helpers.js';

export interface RemotePodman {
  /** The API socket, as an ssh connection's URI path names it. */
  socketPath: string;
  pid: number;
}

function answers(socketPath: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(socketPath);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => {
      resolve(false);
    });
  });
}

/**
 * A directory of the "VM"'s own, outside this host's /tmp (which a VM may cover with its own):
 * under this run's dir in /run, removed by the cleanup (and with the run's dir after the run).
 */
export function vmFilesDir(cleanup: Cleanup): string {
  const dir = mkdtempSync(path.join(inject('lab').runDir, 'vm-'));
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

/**
 * Stands in for a Podman machine's VM (or a remote host): `podman system service` on its own API
 * socket, in its own mount namespace where each of `hidden` is covered by an empty tmpfs, as a
 * directory the VM does not share. It is started without CONTAINER_CONNECTION, so it runs the
 * containers itself; the lab's sshd reaches its socket, and podman clients reach it over ssh.
 */
export async function startRemotePodman(engineEnv: Record<string, string>, hidden: readonly string[], cleanup: Cleanup): Promise<RemotePodman> {
  const socketPath = path.join(vmFilesDir(cleanup), 'podman.sock');
  // Test-side shell, not the daemon's: the values are the test's own paths, passed as arguments.
  const script = 'sock="$1"; shift; for d in "$@"; do mount -t tmpfs -o size=1m,mode=0755 sbx-hidden "$d" || exit 1; done; exec podman system service --time=0 "unix://$sock"';
  const child = spawn('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', script, 'sh', socketPath, ...hidden], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: '/root', ...engineEnv },
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('close', () => {
    resolve();
  }));
  cleanup.add(async () => {
    child.kill('SIGTERM');
    const stopped = await Promise.race([exited.then(() => true), new Promise<boolean>((resolve) => setTimeout(() => {
      resolve(false);
    }, 10_000))]);
    if (!stopped) child.kill('SIGKILL');
  });
  await waitFor(async () => {
    if (child.exitCode !== null) throw new Error(`podman system service exited: ${stderr}`);
    return existsSync(socketPath) && (await answers(socketPath));
  }, 'podman system service to listen', 30_000, 100);
  return { socketPath, pid: child.pid ?? 0 };
}

/**
 * Stands in for a VM's own /tmp: a process holding a mount namespace in which /tmp is a fresh
 * sticky tmpfs, so what the lab's sshd does there (started with `mountNamespaceOf: pid`) and what
 * systemd-tmpfiles cleans there (run with `nsenter --mount=/proc/<pid>/ns/mnt`) never touch this
 * host's /tmp. The host sees that /tmp at `/proc/<pid>/root/tmp`.
 */
export async function startVmTmp(cleanup: Cleanup): Promise<{ pid: number; tmp: string }> {
  // Test-side shell with no outside values; the holder sleeps until the cleanup kills it.
  const child = spawn('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', 'mount -t tmpfs -o mode=1777,size=16m sbx-vm-tmp /tmp && exec sleep 3600'], { stdio: 'ignore' });
  const pid = child.pid ?? 0;
  cleanup.add(() => child.kill('SIGKILL'));
  await waitFor(() => {
    if (child.exitCode !== null) throw new Error(`the VM's mount namespace exited with ${String(child.exitCode)}`);
    return readFileSync(`/proc/${String(pid)}/mountinfo`, 'utf8').includes(' sbx-vm-tmp ');
  }, "the VM's own /tmp");
  return { pid, tmp: `/proc/${String(pid)}/root/tmp` };
}
