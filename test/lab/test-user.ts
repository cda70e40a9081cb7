import { randomBytes } from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { CLI, ROOT, type Cleanup } from '../helpers.js';

/**
 * The shells a user runs sandboxd from: a login shell that has XDG_RUNTIME_DIR (a
 * desktop or ssh session under logind), `su -` (a real `su`, whose login shell has none), and a
 * `sudo -u` shape (sudo's env_reset: HOME, USER, LOGNAME, a secure PATH, nothing of the session).
 */
export type Shell = 'login' | 'su' | 'sudo';

export interface TestUser {
  name: string;
  uid: number;
  gid: number;
  home: string;
  /** /run/user/<uid>, made as logind makes it (the user's, 0700): what the login shell names. */
  runtimeDir: string;
  /** argv (file, args) and env to run `sandboxd <args>` as this user in `shell`. */
  command(shell: Shell, args: readonly string[], extraEnv?: Readonly<Record<string, string>>): { file: string; args: string[]; env: NodeJS.ProcessEnv };
  /** Runs `sandboxd <args>` as this user in `shell`, to completion (bounded). */
  cli(shell: Shell, args: readonly string[], extraEnv?: Readonly<Record<string, string>>, timeout?: number): ReturnType<typeof execa>;
  /** Starts `sandboxd <args>` as this user in `shell`, in the background (killed by the cleanup). */
  spawn(shell: Shell, args: readonly string[], extraEnv?: Readonly<Record<string, string>>): ChildProcess;
  /** Runs any program as the user with a plain environment (podman, to look at its containers). */
  run(file: string, args: readonly string[]): ReturnType<typeof execa>;
  /** pids of this user's processes whose command line includes `sandboxd` and `daemon`. */
  daemons(): number[];
}

const SECURE_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

function quote(word: string): string {
  return `'${word.replaceAll("'", "'\\''")}'`;
}

function processesOf(uid: number): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (statSync(`/proc/${entry}`).uid === uid) pids.push(Number(entry));
    } catch {
      // gone while we looked
    }
  }
  return pids;
}

function commandLine(pid: number): string[] {
  try {
    return readFileSync(`/proc/${String(pid)}/cmdline`, 'utf8').split('\0');
  } catch {
    return [];
  }
}

/**
 * A real non-root account with a home under a fresh temp dir and a rootless podman of its own
 * (its default config files: vfs storage in its home, runc, cgroupfs, no network namespace), so
 * every shell of it finds the same engine without any variable. Removed by the cleanup, with
 * every process it still runs, its containers' storage and its /run/user dir, even on failure.
 */
export async function createTestUser(cleanup: Cleanup, image: { tar: string; name: string } | null = null): Promise<TestUser> {
  const name = `sbxu${randomBytes(3).toString('hex')}`;
  const dir = mkdtempSync('/tmp/sbx-user-');
  chmodSync(dir, 0o755);
  const home = path.join(dir, 'home');
  await execa('useradd', ['--home-dir', home, '--create-home', '--shell', '/bin/sh', '--password', '*', name]);
  const uid = Number((await execa('id', ['-u', name])).stdout);
  const gid = Number((await execa('id', ['-g', name])).stdout);
  const runtimeDir = `/run/user/${String(uid)}`;
  cleanup.add(async () => {
    // Its processes (daemons, conmon, sleeping containers), each by pid: the account is this test's.
    for (let round = 0; round < 20; round += 1) {
      const pids = processesOf(uid);
      if (pids.length === 0) break;
      for (const pid of pids) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await execa('userdel', ['--force', name], { reject: false });
    for (const leftover of [dir, runtimeDir, `/tmp/podman-run-${String(uid)}`, `/tmp/containers-user-${String(uid)}`, `/tmp/storage-run-${String(uid)}`]) {
      rmSync(leftover, { recursive: true, force: true });
    }
  });
  mkdirSync(runtimeDir, { recursive: true, mode: 0o700 });
  chownSync(runtimeDir, uid, gid);
  const containersDir = path.join(home, '.config', 'containers');
  mkdirSync(containersDir, { recursive: true });
  writeFileSync(path.join(containersDir, 'containers.conf'), '[containers]\ndefault_ulimits = []\nnetns = "none"\n[engine]\ncgroup_manager = "cgroupfs"\nruntime = "runc"\n');
  writeFileSync(path.join(containersDir, 'storage.conf'), `[storage]\ndriver = "vfs"\nrunroot = "${home}/.podman-run"\ngraphroot = "${home}/.podman-graph"\n`);
  await execa('chown', ['-R', `${String(uid)}:${String(gid)}`, path.join(home, '.config')]);

  const identity = { HOME: home, USER: name, LOGNAME: name, SHELL: '/bin/sh' };
  const command = (shell: Shell, args: readonly string[], extraEnv: Readonly<Record<string, string>> = {}) => {
    const argv = [process.execPath, CLI, ...args];
    if (shell === 'su') {
      // A real `su -`: a login shell with a reset environment; what the test adds goes on the line.
      const assignments = Object.entries(extraEnv).map(([key, value]) => `${key}=${quote(value)}`);
      return { file: 'su', args: ['-', name, '-c', ['env', ...assignments, ...argv.map(quote)].join(' ')], env: { PATH: SECURE_PATH } };
    }
    const env = { ...identity, PATH: SECURE_PATH, ...(shell === 'login' ? { XDG_RUNTIME_DIR: runtimeDir } : {}), ...extraEnv };
    return { file: 'setpriv', args: [`--reuid=${String(uid)}`, `--regid=${String(gid)}`, '--init-groups', ...argv], env };
  };
  const user: TestUser = {
    name,
    uid,
    gid,
    home,
    runtimeDir,
    command,
    cli: (shell, args, extraEnv, timeout = 60_000) => {
      const { file, args: argv, env } = command(shell, args, extraEnv);
      return execa(file, argv, { env, extendEnv: false, reject: false, timeout, cwd: '/' });
    },
    spawn: (shell, args, extraEnv) => {
      const { file, args: argv, env } = command(shell, args, extraEnv);
      const child = spawn(file, argv, { env, cwd: '/', stdio: ['ignore', 'pipe', 'pipe'] });
      cleanup.add(() => child.kill('SIGKILL'));
      return child;
    },
    run: (file, args) =>
      execa('setpriv', [`--reuid=${String(uid)}`, `--regid=${String(gid)}`, '--init-groups', file, ...args], {
        env: { ...identity, PATH: SECURE_PATH },
        extendEnv: false,
        reject: false,
        timeout: 60_000,
        cwd: '/',
      }),
    daemons: () => processesOf(uid).filter((pid) => {
      const argv = commandLine(pid);
      return argv.includes(CLI) && argv.includes('daemon');
    }),
  };
  if (image !== null) {
    const imported = await user.run('podman', ['import', image.tar, image.name]);
    if (imported.exitCode !== 0) throw new Error(`podman import as ${name} failed: ${String(imported.stderr)}`);
  }
  return user;
}

/** The lab's rootfs as a tar any user can read and import into a rootless podman. */
export async function labImageTar(labDir: string, cleanup: Cleanup): Promise<string> {
  const dir = mkdtempSync('/tmp/sbx-image-');
  chmodSync(dir, 0o755);
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  const tar = path.join(dir, 'rootfs.tar');
  await execa('tar', ['-C', path.join(labDir, 'rootfs'), '-cf', tar, '.']);
  chmodSync(tar, 0o644);
  return tar;
}

/** The tarball `npm pack` makes of this checkout, readable by any user: what a person installs. */
export async function packTarball(cleanup: Cleanup): Promise<string> {
  const dir = mkdtempSync('/tmp/sbx-pack-');
  chmodSync(dir, 0o755);
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  await execa('npm', ['pack', '--silent', '--pack-destination', dir], { cwd: ROOT, timeout: 120_000 });
  const [name] = readdirSync(dir).filter((file) => file.endsWith('.tgz'));
  if (name === undefined) throw new Error(`npm pack left no tarball in ${dir}`);
  const tarball = path.join(dir, name);
  chmodSync(tarball, 0o644);
  return tarball;
}
