import { execFileSync } from 'node:child_process';
import { copyFileSync, chmodSync, mkdirSync, writeFileSync, symlinkSync } from 'node:fs';
import path from 'node:path';

/** Binaries the container image needs; their shared libraries are copied alongside. */
const BINARIES = ['/usr/bin/ssh-add', '/usr/bin/ssh', '/usr/bin/ssh-keygen', '/usr/bin/git'];
/** git runs these from its exec path for local and ssh transports; they are git itself. */
const GIT_EXEC_LINKS = ['git-upload-pack', 'git-receive-pack', 'git-upload-archive'];
const APPLETS = ['sh', 'ls', 'cat', 'id', 'echo', 'env', 'test', 'true', 'false', 'touch', 'mkdir', 'rm', 'stat', 'grep', 'sleep', 'readlink', 'pwd'];

function libraries(binary: string): string[] {
  const out = execFileSync('ldd', [binary], { encoding: 'utf8' });
  return [...out.matchAll(/(\/[^\s]+\.so[^\s]*)/g)].map((match) => match[1] ?? '').filter((lib) => lib !== '');
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
    for (const lib of libraries(binary)) {
      mkdirSync(path.join(root, path.dirname(lib)), { recursive: true });
      copyFileSync(lib, path.join(root, lib));
    }
  }
  mkdirSync(path.join(root, 'usr/lib/git-core'), { recursive: true });
  mkdirSync(path.join(root, 'usr/share/git-core/templates'), { recursive: true });
  for (const link of GIT_EXEC_LINKS) symlinkSync('/usr/bin/git', path.join(root, 'usr/lib/git-core', link));
  writeFileSync(path.join(root, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\nu:x:1000:1000:u:/home/u:/bin/sh\n');
  writeFileSync(path.join(root, 'etc/group'), 'root:x:0:\nu:x:1000:\n');
  chmodSync(path.join(root, 'tmp'), 0o1777);
  chmodSync(path.join(root, 'home/u'), 0o777);
}
