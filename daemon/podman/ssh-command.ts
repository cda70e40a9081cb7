import path from 'node:path';
import { SandboxdError } from '../../shared/errors.js';
import { isLoopback, type PodmanConnection } from './connections.js';
import { shQuote } from '../os/text.js';

export const READY_MARKER = 'sandboxd-ready';
/** Printed first, before anything can fail, so a refused bind can be explained (DESIGN §6 SELinux). */
export const SELINUX_MARKER = 'sandboxd-selinux';
/** The answer to a query or a slot command: `sandboxd-seen <id> d|f|-`. */
export const SEEN_MARKER = 'sandboxd-seen';
/** The answer to `V <id>`: `sandboxd-slots <id> [name…]`, the slots whose socket is not the one published. */
export const SLOTS_MARKER = 'sandboxd-slots';
/** The root is not the remote user's own directory (taken first, or a symlink): the daemon picks another. */
export const ROOT_TAKEN_MARKER = 'sandboxd-root-taken';
/** The tunnel directory could not be locked (no flock in the VM): tmpfiles may age it out. */
export const UNLOCKED_MARKER = 'sandboxd-unlocked';
/** Sent on stdin by a deliberate halt, so the remote side also removes the tunnel directory. */
export const HALT_WORD = 'halt';
/** How long the remote side waits for its lock while tmpfiles holds the directory's. */
const LOCK_WAIT_SECONDS = 2;
/** The socket sshd binds in each session's directory, and what a container's SSH_AUTH_SOCK names. */
export const SLOT_SOCKET = 'agent.sock';

/**
 * The whole remote command, the same for every tunnel: it reads one line from stdin and evaluates
 * it. The script, and with it every VM path, travels on stdin and so never appears on any argv in
 * the VM (DESIGN §6); `read` takes one byte at a time from a pipe, so it leaves the rest of stdin
 * (queries, slot commands, the halt word) to the script.
 */
export const REMOTE_STUB = `exec /bin/sh -c 'IFS= read -r s && eval "$s"'`;


export interface TunnelLayout {
  /** The remote user's tunnel root in the VM: 0700, so nothing in it is reachable by others. */
  root: string;
  /** Per-tunnel directory in the VM, holding one directory per session; its name is a secret. */
  dir: string;
}

/** `dirName` is unguessable (see `tunnelDirName`). */
export function tunnelLayout(vmRoot: string, dirName: string): TunnelLayout {
  return { root: vmRoot, dir: path.posix.join(vmRoot, dirName) };
}

/** A session's directory in the VM (a container mounts it) and the socket sshd binds in it. */
export function slotPaths(layout: TunnelLayout, slot: string): { dir: string; socket: string } {
  const dir = path.posix.join(layout.dir, slot);
  return { dir, socket: path.posix.join(dir, SLOT_SOCKET) };
}

/**
 * Runs over the tunnel's own ssh connection, so readiness costs no extra login (DESIGN §6). It
 * prints the VM's SELinux mode, enters the root and checks it is what it names (below), enters the
 * 0711 tunnel dir, locks it and prints the ready line. Then it answers queries and slot commands
 * (`queryLoop`) until stdin closes (halt, crash, or the daemon dying). Each session has a directory
 * of its own in the tunnel dir, where sshd binds its socket (a remote forward the daemon asks the
 * ssh master for over the control socket); the sessions' directories stay when the tunnel stops
 * unless the daemon said `halt`: running containers bind-mount those very inodes, and the next
 * daemon binds their sockets again.
 *
 * The root sits in /tmp, where another user of the VM can create that name first or plant a
 * symlink there at any moment. So the script never follows the name: it creates it (or finds
 * something there), enters it with `cd -P`, and then checks `.`, the directory it is in, rather
 * than the name: the physical path is the root's own (no symlink led there) and the remote user
 * owns it. From then on every command names paths relative to that directory, so a name swapped
 * after the check changes nothing. A root that fails the check is left alone: the script prints
 * ROOT_TAKEN_MARKER and the daemon chooses another name.
 *
 * While the tunnel runs, the script holds a shared BSD lock on the tunnel dir: systemd-tmpfiles
 * skips a directory it cannot lock, with everything in it (tmpfiles.d(5), "Age"), so Fedora's
 * 10-day ageing of /tmp never removes a session's socket under running containers.
 *
 * No argv shows a path in the VM: the script enters the root's parent first and creates the root
 * by its bare name (which anyone can list in /tmp anyway), the tunnel dir's `mkdir`/`rm` run inside
 * a root no other user can enter, and slot commands name a session's directory only relative to
 * it. One line: the stub reads exactly one.
 */
export function remoteScript(layout: TunnelLayout): string {
  const { root, dir } = layout;
  const fail = (code: number, message: string): string => `{ echo "sandboxd-error ${message}" >&2; exit ${code}; }`;
  return [
    `r=${shQuote(root)}; n=${shQuote(path.posix.basename(dir))}`,
    `e=none; [ -r /sys/fs/selinux/enforce ] && read -r e < /sys/fs/selinux/enforce; echo "${SELINUX_MARKER} $e"`,
    'umask 077',
    `d=$(cd -P -- "\${r%/*}" && pwd -P) && cd -- "$d" || ${fail(3, 'cannot enter the directory of $r')}`,
    `b=\${r##*/}`,
    // Something already there (ours from before, or anyone's) is judged below, never followed.
    `[ -e "$b" ] || [ -L "$b" ] || mkdir -m 700 -- "$b" 2>/dev/null || [ -e "$b" ] || [ -L "$b" ] || ${fail(3, 'cannot create $r')}`,
    `if cd -P -- "$b" 2>/dev/null && [ "$(pwd -P)" = "$d/$b" ] && [ -O . ]; then chmod 700 . || ${fail(3, 'cannot make $r private')}; else echo ${ROOT_TAKEN_MARKER}; exit 6; fi`,
    `{ [ -d "$n" ] || mkdir -m 711 -- "$n"; } && cd -P -- "$n" && [ -O . ] || ${fail(3, 'cannot create the tunnel directory in $r')}`,
    `exec 9<. && { flock -s -w ${LOCK_WAIT_SECONDS} 9 2>/dev/null || echo ${UNLOCKED_MARKER}; }`,
    `echo ${READY_MARKER}`,
    queryLoop(SLOT_COMMANDS),
    `[ "$c" = ${HALT_WORD} ] && cd .. && rm -rf -- "$n"`,
    'exit 0',
  ].join('; ');
}

/**
 * A session's directory is named by the daemon (16 hex); a line that names anything else is
 * answered `-`. `m` makes it (0711), or finds it and removes the socket an earlier bind left in it
 * (sshd refuses to bind over a file, and leaves the file when it stops listening): a directory it
 * just made holds nothing, so a new session's costs the VM one process; after sshd bound
 * the socket, `p` makes it usable by any container user (sshd binds it 0600) and keeps a hard link
 * to it (`.bound`), which `V` compares every directory's socket with; `r` removes the directory.
 * Each is answered `sandboxd-seen <id> d`, or `-` when it failed; `V` with `sandboxd-slots <id>`
 * and the names whose socket is not the one bound.
 */
const SLOT_COMMANDS = [
  `"m "*) q=\${c#m }; k=\${q%% *}; p=\${q#* }; t=-; case "$p" in ''|*[!0-9a-f]*) ;; *) if mkdir -m 711 -- "$p" 2>/dev/null; then t=d; elif [ -d "$p" ] && [ ! -L "$p" ] && [ -O "$p" ] && rm -f -- "$p/${SLOT_SOCKET}" "$p/.bound"; then t=d; fi;; esac; echo "${SEEN_MARKER} $k $t";;`,
  `"p "*) q=\${c#p }; k=\${q%% *}; p=\${q#* }; t=-; case "$p" in ''|*[!0-9a-f]*) ;; *) [ -S "$p/${SLOT_SOCKET}" ] && chmod 666 "$p/${SLOT_SOCKET}" && ln -f "$p/${SLOT_SOCKET}" "$p/.bound" && t=d;; esac; echo "${SEEN_MARKER} $k $t";;`,
  `"r "*) q=\${c#r }; k=\${q%% *}; p=\${q#* }; t=-; case "$p" in ''|*[!0-9a-f]*) ;; *) rm -f -- "$p/${SLOT_SOCKET}" "$p/.bound"; rmdir -- "$p" 2>/dev/null; t=d;; esac; echo "${SEEN_MARKER} $k $t";;`,
  `"V "*) k=\${c#V }; b=''; for f in */; do f=\${f%/}; [ -e "$f/.bound" ] || continue; [ -S "$f/.bound" ] && [ "$f/${SLOT_SOCKET}" -ef "$f/.bound" ] || b="$b $f"; done; echo "${SLOTS_MARKER} $k$b";;`,
].join(' ');

/**
 * Answers `s <id> <path>` lines with `sandboxd-seen <id> d|f|-` until stdin closes or another word
 * (the halt word) arrives, which it leaves in `$c`; `cases` adds commands of its own. `[` is a
 * builtin: no path reaches an argv.
 */
export function queryLoop(cases = ''): string {
  return `c=''; while IFS= read -r c; do case "$c" in "s "*) q=\${c#s }; k=\${q%% *}; p=\${q#* }; if [ -d "$p" ]; then t=d; elif [ -e "$p" ]; then t=f; else t=-; fi; echo "${SEEN_MARKER} $k $t";; ${cases} *) break;; esac; done`;
}

export interface SshOptions {
  connection: PodmanConnection;
  knownHostsPath: string;
  aliveIntervalSeconds: number;
  aliveCountMax: number;
  connectTimeoutSeconds: number;
}

/**
 * A path as one `-o Key=<value>` word, read back by ssh as that path.
 *
 * ssh splits an option's value into words like a config line (readconf.c
 * `process_config_line_depth` → misc.c `argv_split`): on blanks and tabs, with `'`/`"` quoting,
 * `\\` escaping a quote, a backslash or (unquoted) a blank, and `#` starting a comment; so
 * `UserKnownHostsFile=~/Library/Application Support/sandboxd/known_hosts` named two files. Double
 * quotes, with `\\` and `"` escaped, keep it one word (before 8.7, `strdelim` honoured double
 * quotes too). Then the path is expanded (ssh.c, `default_client_percent_dollar_expand`; for
 * UserKnownHostsFile since 8.4, IdentityFile, ControlPath): `%` starts a token, so it is doubled.
 * `${` starts an environment variable and has no escape (misc.c `vdollar_percent_expand`): such a
 * path stays as it is, and ssh exits with "invalid environment variable expansion" unless the
 * variable is set. The identity goes the same way, not as `-i`: ssh.c looks for `-i`'s file as
 * written and then expands it like IdentityFile, so no spelling of a path with `%` works there.
 */
export function sshConfigPath(file: string): string {
  return `"${file.replaceAll('%', '%%').replace(/["\\]/g, (char) => `\\${char}`)}"`;
}

/**
 * The login part shared by the tunnel and a one-off probe; no shell anywhere on the host side
 * (DESIGN §9). `controlPath`: this login is a ControlMaster listening there (a tunnel).
 */
export function sshLoginArgs(options: SshOptions, controlPath?: string): string[] {
  const { connection } = options;
  const { target } = connection;
  const loopback = isLoopback(target.host);
  return [
    // A machine on loopback is ours alone: like `podman machine ssh`, skip user config and host keys.
    ...(loopback
      ? ['-F', '/dev/null', '-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null']
      : ['-o', 'StrictHostKeyChecking=accept-new', '-o', `UserKnownHostsFile=${sshConfigPath(options.knownHostsPath)}`]),
    '-o', 'BatchMode=yes',
    '-o', `ServerAliveInterval=${options.aliveIntervalSeconds}`,
    '-o', `ServerAliveCountMax=${options.aliveCountMax}`,
    '-o', `ConnectTimeout=${options.connectTimeoutSeconds}`,
    ...(controlPath === undefined ? ['-o', 'ControlMaster=no', '-o', 'ControlPath=none'] : ['-o', 'ControlMaster=yes', '-o', `ControlPath=${sshConfigPath(controlPath)}`, '-o', 'ControlPersist=no']),
    '-o', 'LogLevel=ERROR',
    '-T',
    '-p', String(target.port),
    ...(connection.identity === null ? [] : ['-o', `IdentityFile=${sshConfigPath(connection.identity)}`, '-o', 'IdentitiesOnly=yes']),
  ];
}

function destination(connection: PodmanConnection): string {
  const { target } = connection;
  return target.user === null ? target.host : `${target.user}@${target.host}`;
}

/**
 * argv for a tunnel's ssh: a ControlMaster on `controlPath` (in a daemon-private directory) that
 * runs the fixed stub; `remoteScript` goes on stdin, and every session's forward is asked for over
 * the control socket (ssh-mux.ts). No VM path is on it.
 */
export function sshMasterArgs(options: SshOptions & { controlPath: string }): string[] {
  return [...sshLoginArgs(options, options.controlPath), '--', destination(options.connection), REMOTE_STUB];
}

/** argv for one login that only runs the stub (a probe with no tunnel; its script goes on stdin). */
export function sshProbeArgs(options: SshOptions): string[] {
  return [...sshLoginArgs(options), '--', destination(options.connection), REMOTE_STUB];
}

const AUTH_FAILED = /permission denied|too many authentication failures|no such identity|host key verification failed/i;
const UNREACHABLE = [/connection refused/i, /connection timed out/i, /no route to host/i, /could not resolve hostname/i, /network is unreachable/i, /connection closed by/i, /connection reset/i, /timeout, server .* not responding/i];
const FORWARD_REFUSED = /remote port forwarding failed/i;

/**
 * Turns ssh's exit and stderr into a stable code, keeping ssh's own line in the message.
 * `selinux` is the VM's mode as the remote script reported it (null: not known).
 */
export function classifySshFailure(connection: string, stderr: string, exitCode: number | null, selinux: SelinuxMode | null = null): SandboxdError {
  const lines = stderr.split('\n').map((line) => line.trim()).filter((line) => line !== '');
  const last = lines.at(-1) ?? `ssh exited with code ${exitCode ?? 'unknown'}`;
  const refused = lines.find((line) => AUTH_FAILED.test(line));
  if (refused !== undefined) return new SandboxdError('TUNNEL_AUTH_FAILED', `ssh to connection ${connection} was refused: ${refused}`);
  if (lines.some((line) => UNREACHABLE.some((pattern) => pattern.test(line)))) {
    return new SandboxdError('TUNNEL_UNREACHABLE', `the machine behind connection ${connection} is unreachable: ${last}`);
  }
  const bind = lines.find((line) => FORWARD_REFUSED.test(line));
  if (bind !== undefined) {
    // Newer Fedora policies confine sshd-session, the process that binds the -R socket.
    const cause =
      selinux === 'enforcing'
        ? 'SELinux enforces in that VM and is the likely cause (it can deny sshd-session the bind)'
        : `SELinux in the VM is a possible cause${selinux === null ? '' : ` (it is ${selinux} there)`}`;
    return new SandboxdError('TUNNEL_BIND_REFUSED', `sshd behind connection ${connection} refused to bind the agent socket: ${bind}; ${cause}`);
  }
  return new SandboxdError('TUNNEL_FAILED', `the tunnel over connection ${connection} failed: ${last}`);
}

export type SelinuxMode = 'enforcing' | 'permissive' | 'none';

/** What `/sys/fs/selinux/enforce` holds (1 or 0), or `none` when the file does not exist. */
export function parseSelinux(value: string): SelinuxMode {
  const trimmed = value.trim();
  if (trimmed === '1') return 'enforcing';
  if (trimmed === '0') return 'permissive';
  return 'none';
}

/** 0.5 s, 1 s, 2 s … capped, so a machine that is down is retried without hammering it. */
export function backoffMs(attempt: number, baseMs = 500, capMs = 8_000): number {
  return Math.min(capMs, baseMs * 2 ** Math.max(0, attempt));
}
