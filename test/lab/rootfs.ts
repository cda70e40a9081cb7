import { execFileSync } from 'node:child_process';
import { copyFileSync, chmodSync, existsSync, lstatSync, mkdirSync, readFileSync, writeFileSync, symlinkSync } from 'node:fs';
import path from 'node:path';

/** Binaries the container image needs; their shared libraries are copied alongside. */
const BINARIES = ['/usr/bin/ssh-add', '/usr/bin/ssh', '/usr/bin/ssh-keygen', '/usr/bin/git'];
/** git runs these from its exec path for local and ssh transports (and `git submodule`); they are git itself. */
const GIT_EXEC_LINKS = ['git-upload-pack', 'git-receive-pack', 'git-upload-archive', 'git-submodule--helper'];
/**
 * `git submodule` is a shell script (git < 2.43) sourcing these; the envsubst helper is a binary of
 * its own; git-remote-http speaks https (git-remote-https links to it).
 */
const GIT_EXEC_FILES = ['git-submodule', 'git-sh-setup', 'git-sh-i18n', 'git-sh-i18n--envsubst', 'git-remote-http'];
const GIT_EXEC_ALIASES: Record<string, string> = { 'git-remote-https': 'git-remote-http' };
const APPLETS = ['sh', 'ls', 'cat', 'id', 'echo', 'env', 'test', 'true', 'false', 'touch', 'mkdir', 'rm', 'stat', 'grep', 'sleep', 'readlink', 'pwd', 'sed', 'basename', 'mv', 'ln', 'cp', 'chmod', 'printf', 'mkfifo'];

function libraries(binary: string): string[] {
  const out = execFileSync('ldd', [binary], { encoding: 'utf8' });
  return [...out.matchAll(/(\/[^\s]+\.so[^\s]*)/g)].map((match) => match[1] ?? '').filter((lib) => lib !== '');
}

function copyLibrary(root: string, lib: string): void {
  mkdirSync(path.join(root, path.dirname(lib)), { recursive: true });
  copyFileSync(lib, path.join(root, lib));
}

function isElf(file: string): boolean {
  return readFileSync(file).subarray(0, 4).toString('latin1') === '\x7fELF';
}

/**
 * A tiny offline image (busybox-static + ssh, ssh-add, ssh-keygen and git from this host), so the tests need no
 * registry: `tar -C rootfs -c . | podman import - localhost/sandboxd-lab`.
 */
export function buildRootfs(root: string): void {
  for (const dir of ['bin', 'usr/bin', 'etc', 'tmp', 'root', 'home/u', 'run']) mkdirSync(path.join(root, dir), { recursive: true });
  copyFileSync('/bin/busybox', path.join(root, 'bin/busybox'));
  chmodSync(path.join(root, 'bin/busybox'), 0o755);
  for (const applet of APPLETS) symlinkSync('busybox', path.join(root, 'bin', applet));
  for (const binary of BINARIES) {
    copyFileSync(binary, path.join(root, binary));
    chmodSync(path.join(root, binary), 0o755);
    for (const lib of libraries(binary)) copyLibrary(root, lib);
  }
  mkdirSync(path.join(root, 'usr/lib/git-core'), { recursive: true });
  mkdirSync(path.join(root, 'usr/share/git-core/templates'), { recursive: true });
  for (const link of GIT_EXEC_LINKS) symlinkSync('/usr/bin/git', path.join(root, 'usr/lib/git-core', link));
  for (const file of GIT_EXEC_FILES) {
    const source = path.join('/usr/lib/git-core', file);
    if (!existsSync(source) || lstatSync(source).isSymbolicLink()) continue;
    copyFileSync(source, path.join(root, source));
    chmodSync(path.join(root, source), 0o755);
    if (isElf(source)) for (const lib of libraries(source)) copyLibrary(root, lib);
  }
  for (const [alias, target] of Object.entries(GIT_EXEC_ALIASES)) {
    if (existsSync(path.join(root, 'usr/lib/git-core', target))) symlinkSync(target, path.join(root, 'usr/lib/git-core', alias));
  }
  writeFileSync(path.join(root, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\nu:x:1000:1000:u:/home/u:/bin/sh\n');
  writeFileSync(path.join(root, 'etc/group'), 'root:x:0:\nu:x:1000:\n');
  chmodSync(path.join(root, 'tmp'), 0o1777);
  chmodSync(path.join(root, 'home/u'), 0o777);
}
