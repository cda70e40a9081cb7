import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { buildRootfs } from './rootfs.js';

export interface LabInfo {
  /** null when podman or the image could not be set up; e2e tests fail under CI, skip otherwise. */
  podman: { env: Record<string, string>; image: string } | null;
  reason: string | null;
  dir: string;
  /**
   * This run's own directory under /run, for what must live outside /tmp (a "VM" of the lab covers
   * /tmp with its own): removed after the run, with whatever a killed test left in it.
   */
  runDir: string;
}

declare module 'vitest' {
  export interface ProvidedContext {
    lab: LabInfo;
  }
}

export const LAB_IMAGE = 'localhost/sandboxd-lab';

function podmanAvailable(): string | null {
  if (spawnSync('podman', ['--version']).status !== 0) return 'podman is not installed';
  if (!existsSync('/bin/busybox')) return 'busybox-static is not installed';
  if (spawnSync('runc', ['--version']).status !== 0) return 'runc is not installed';
  return null;
}

/**
 * The end-to-end lab, set up once per run and torn down after it: an isolated podman (own
 * containers.conf and storage, so the machine's config is never touched) with an offline image.
 */
export default function setup(project: TestProject): () => void {
  const dir = mkdtempSync('/tmp/sbx-lab-');
  const runDir = mkdtempSync('/run/sbx-lab-');
  let info: LabInfo = { podman: null, reason: podmanAvailable(), dir, runDir };
  if (info.reason === null) {
    const containersConf = path.join(dir, 'containers.conf');
    const storageConf = path.join(dir, 'storage.conf');
    writeFileSync(
      containersConf,
      '[containers]\ndefault_ulimits = []\n[engine]\ncgroup_manager = "cgroupfs"\nruntime = "runc"\n',
    );
    writeFileSync(
      storageConf,
      `[storage]\ndriver = "vfs"\nrunroot = "${dir}/run"\ngraphroot = "${dir}/graph"\n`,
    );
    const env = { CONTAINERS_CONF: containersConf, CONTAINERS_STORAGE_CONF: storageConf };
    const rootfs = path.join(dir, 'rootfs');
    buildRootfs(rootfs);
    const tar = spawnSync('tar', ['-C', rootfs, '-c', '.'], { maxBuffer: 256 * 1024 * 1024 });
    const imported = spawnSync('podman', ['import', '-', LAB_IMAGE], { input: tar.stdout, env: { ...process.env, ...env }, timeout: 60_000 });
    info =
      imported.status === 0
        ? { podman: { env, image: LAB_IMAGE }, reason: null, dir, runDir }
        : { podman: null, reason: `podman import failed: ${imported.stderr.toString()}`, dir, runDir };
  }
  project.provide('lab', info);
  return () => {
    if (info.podman !== null) {
      spawnSync('podman', ['rm', '-af'], { env: { ...process.env, ...info.podman.env }, timeout: 30_000 });
    }
    try {
      execFileSync('umount', ['-R', path.join(dir, 'graph')], { stdio: 'ignore' });
    } catch {
      // vfs storage leaves nothing mounted in the usual case
    }
    rmSync(dir, { recursive: true, force: true });
    rmSync(runDir, { recursive: true, force: true });
  };
}
