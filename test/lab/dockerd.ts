import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { Cleanup, pidAlive, waitFor } from '../helpers.js';
import type { LabInfo } from './global-setup.js';

export interface Dockerd {
  /** `unix://<the engine's dir>/docker.sock`, this run's own: what a session's DOCKER_HOST names. */
  host: string;
  socket: string;
  /** The lab image, loaded from the podman lab. */
  image: string;
  /** Runs the real docker CLI against this engine. */
  docker(args: string[], input?: string): Promise<{ exitCode: number | undefined; stdout: string; stderr: string }>;
  /** Stops the engine (containers die with it) and starts it again on the same socket and data. */
  restart(): Promise<void>;
}

/** Why the Docker lab cannot run here, or null (Debian's docker.io: dockerd, containerd, runc). */
export function dockerLabUnavailable(lab: LabInfo): string | null {
  if (lab.podman === null) return `the podman lab is missing: ${lab.reason ?? 'unknown'}`;
  if (spawnSync('dockerd', ['--version']).status !== 0) return 'dockerd is not installed (apt-get install -y docker.io)';
  if (spawnSync('docker', ['--version']).status !== 0) return 'the docker CLI is not installed';
  return null;
}

/**
 * A real Docker Engine of the test's own: its own socket, data and exec roots (so its managed
 * containerd is its own too), no iptables and no bridge network, so it touches nothing of the
 * machine's. Stopped, with its containers and files, by the cleanup.
 */
export async function startDockerd(name: string, lab: LabInfo, cleanup: Cleanup): Promise<Dockerd> {
  const podman = lab.podman;
  if (podman === null) throw new Error('the podman lab is missing');
  const dir = path.join(lab.dir, `dockerd-${name}`);
  mkdirSync(dir, { recursive: true });
  const socket = path.join(dir, 'docker.sock');
  const host = `unix://${socket}`;
  const pidfile = path.join(dir, 'dockerd.pid');
  const env = { ...process.env, DOCKER_HOST: host };
  const docker: Dockerd['docker'] = async (args, input) => {
    const result = await execa('docker', args, { env, reject: false, timeout: 120_000, ...(input === undefined ? {} : { input }) });
    return { exitCode: result.exitCode, stdout: result.stdout, stderr: result.stderr };
  };
  const start = async (): Promise<void> => {
    const child = spawn(
      'dockerd',
      [
        '--iptables=false', '--ip6tables=false', '--bridge=none', '--exec-opt', 'native.cgroupdriver=cgroupfs',
        '--host', host, '--data-root', path.join(dir, 'data'), '--exec-root', path.join(dir, 'exec'), '--pidfile', pidfile,
      ],
      { stdio: ['ignore', 'ignore', 'ignore'], detached: true },
    );
    child.unref();
    await waitFor(async () => (await docker(['version', '--format', '{{.Server.Version}}'])).exitCode === 0, `dockerd ${name} to answer`, 60_000, 200);
  };
  const stop = async (): Promise<void> => {
    const pid = existsSync(pidfile) ? Number(readFileSync(pidfile, 'utf8').trim()) : 0;
    if (pid > 0 && pidAlive(pid)) {
      process.kill(pid, 'SIGTERM');
      await waitFor(() => !pidAlive(pid), `dockerd ${name} to stop`, 30_000, 100);
    }
  };
  cleanup.add(async () => {
    await docker(['rm', '--force', ...(await docker(['ps', '--all', '--quiet'])).stdout.split('\n').filter((id) => id !== '')]);
    await stop();
    // What the engine left mounted under its roots (a host-network container's netns/default
    // too), deepest first; `umount -R` of a root that is no mount point itself reaches none.
    const left = readFileSync('/proc/self/mounts', 'utf8')
      .split('\n')
      .map((line) => line.split(' ')[1] ?? '')
      .filter((point) => point.startsWith(`${dir}/`))
      .sort((a, b) => b.length - a.length);
    for (const point of left) spawnSync('umount', [point], { stdio: 'ignore' });
    rmSync(dir, { recursive: true, force: true });
  });
  await start();
  const saved = spawnSync('podman', ['save', podman.image], { env: { ...process.env, ...podman.env }, maxBuffer: 512 * 1024 * 1024, timeout: 120_000 });
  if (saved.status !== 0) throw new Error(`podman save failed: ${saved.stderr.toString()}`);
  const loaded = spawnSync('docker', ['load'], { env, input: saved.stdout, timeout: 120_000 });
  if (loaded.status !== 0) throw new Error(`docker load failed: ${loaded.stderr.toString()}`);
  return {
    host,
    socket,
    image: `${podman.image}:latest`,
    docker,
    async restart() {
      await stop();
      await start();
    },
  };
}
