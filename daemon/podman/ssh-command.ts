import path from 'node:path';
import { SandboxdError } from '../../shared/errors.js';
import { isLoopback, type PodmanConnection } from './connections.js';
import { shQuote } from '../os/text.js';

export const READY_MARKER = 'sandboxd-ready';
/** Printed first, before anything can fail, so a refused bind can be explained (DESIGN §6 SELinux). */
export const SELINUX_MARKER = 'sandboxd-selinux';
/** The answer to a visibility query: `sandboxd-seen <id> d|f|-`. */
export const SEEN_MARKER = 'sandboxd-seen';
/** The root is not the remote user's own directory (taken first, or a symlink): the daemon picks another. */
export const ROOT_TAKEN_MARKER = 'sandboxd-root-taken';
/** The tunnel directory could not be locked (no flock in the VM): tmpfiles may age it out. */
export const UNLOCKED_MARKER = 'sandboxd-unlocked';
/** Sent on stdin by a deliberate halt, so the remote side also removes the tunnel directory. */
export const HALT_WORD = 'halt';
/** How long the remote side waits for sshd to bind the forwarded socket (polls of 20 ms). */
const BIND_WAIT_POLLS = 250;
/** How long the remote side waits for its lock while tmpfiles holds the directory's. */
const LOCK_WAIT_SECONDS = 2;

/**
 * The whole remote command, the same for every tunnel: it reads one line from stdin and evaluates
 * it. The script, and with it every VM path, travels on stdin and so never appears on any argv in
 * the VM (DESIGN §6); `read` takes one byte at a time from a pipe, so it leaves the rest of stdin
 * (queries, the halt word) to the script.
 */
export const REMOTE_STUB = `exec /bin/sh -c 'IFS= read -r s && eval "$s"'`;


export interface TunnelLayout {
  /** The remote user's tunnel root in the VM: 0700, so nothing in it is reachable by others. */
  root: string;
  /** Per-tunnel directory in the VM, mounted by containers; its name is a secret. */
  dir: string;
  /** This generation's socket name inside `dir`. */
  generationName: string;
  /**
   * Where sshd binds it: beside the root (which may not exist yet), under a fresh random name that
   * says nothing about `dir`, so a listing of /tmp reveals nothing and nothing stale is in the way.
   */
  bindPath: string;
}

/** `dirName` is unguessable (see `tunnelDirName`); `nonce` is fresh per generation. */
export function tunnelLayout(vmRoot: string, dirName: string, generation: number, nonce: string): TunnelLayout {
  return {
    root: vmRoot,
    dir: path.posix.join(vmRoot, dirName),
    generationName: `a-${generation}-${nonce}.sock`,
    bindPath: `${vmRoot}.${nonce}.sock`,
  };
}

/**
 * Runs over the tunnel's own ssh connection, so readiness costs no extra login (DESIGN §6). It
 * prints the VM's SELinux mode, enters the root and checks it is what it names (below), enters the
 * 0711 tunnel dir, locks it, waits for sshd's bind, moves the socket in, makes it usable by any
 * container user (0666), atomically repoints `agent.sock`, removes older generations and prints the
 * ready line. Then it answers visibility queries (`s <id> <path>` → `sandboxd-seen <id> d|f|-`)
 * until stdin closes (halt, crash, or the daemon dying) and removes this generation's socket. The
 * directory itself stays unless the daemon said `halt`: running containers bind-mount that very
 * inode, and a re-created directory would be invisible to them.
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
 * 10-day ageing of /tmp never removes `agent.sock` under running containers.
 *
 * `leftovers` are the bind paths of this tunnel's earlier generations that closed before they moved
 * their socket in (ssh or sshd killed in that window); they are removed first.
 *
 * No argv shows the tunnel dir: only the `mkdir`/`rmdir` that create and remove it name it, inside
 * a root no other user can enter. One line: the stub reads exactly one.
 */
export function remoteScript(layout: TunnelLayout, leftovers: readonly string[] = []): string {
  const { root, dir, generationName, bindPath } = layout;
  const fail = (code: number, message: string): string => `{ echo "sandboxd-error ${message}" >&2; exit ${code}; }`;
  return [
    `r=${shQuote(root)}; n=${shQuote(path.posix.basename(dir))}; g=${shQuote(generationName)}; b=${shQuote(bindPath)}`,
    `e=none; [ -r /sys/fs/selinux/enforce ] && read -r e < /sys/fs/selinux/enforce; echo "${SELINUX_MARKER} $e"`,
    'umask 077',
    // Bind sockets of earlier generations that died before moving them in: daemon-made names only.
    ...(leftovers.length === 0 ? [] : [removeLeftovers(leftovers)]),
    // Something already there (ours from before, or anyone's) is judged below, never followed.
    `mkdir -m 700 -- "$r" 2>/dev/null || [ -e "$r" ] || [ -L "$r" ] || ${fail(3, 'cannot create $r')}`,
    `d=$(cd -P -- "\${r%/*}" && pwd -P) || ${fail(3, 'cannot enter the directory of $r')}`,
    `if cd -P -- "$r" 2>/dev/null && [ "$(pwd -P)" = "$d/\${r##*/}" ] && [ -O . ]; then chmod 700 . || ${fail(3, 'cannot make $r private')}; else echo ${ROOT_TAKEN_MARKER}; exit 6; fi`,
    `{ [ -d "$n" ] || mkdir -m 711 -- "$n"; } && cd -P -- "$n" && [ -O . ] || ${fail(3, 'cannot create the tunnel directory in $r')}`,
    `exec 9<. && { flock -s -w ${LOCK_WAIT_SECONDS} 9 2>/dev/null || echo ${UNLOCKED_MARKER}; }`,
    `i=0; while [ ! -S "$b" ]; do i=$((i+1)); [ $i -gt ${BIND_WAIT_POLLS} ] && ${fail(4, 'socket $b never appeared')}; sleep 0.02; done`,
    // `.bound` is a hard link to the socket sshd bound: a later swap of `$g` or of `agent.sock`
    // under the same names no longer matches it (the `v` query below).
    `mv -f "$b" "$g" && chmod 666 "$g" && ln -f "$g" .bound && ln -sfn "$g" .agent.sock.new && mv -f .agent.sock.new agent.sock || ${fail(5, 'cannot publish $g')}`,
    'for f in a-*.sock; do [ "$f" = "$g" ] || rm -f "$f"; done',
    `echo ${READY_MARKER}`,
    queryLoop(),
    '[ .bound -ef "$g" ] && rm -f .bound; rm -f "$g"; [ "$(readlink agent.sock)" = "$g" ] && rm -f agent.sock',
    `[ "$c" = ${HALT_WORD} ] && cd .. && rmdir -- "$n" 2>/dev/null`,
    'exit 0',
  ].join('; ');
}

function removeLeftovers(leftovers: readonly string[]): string {
  return `rm -f ${leftovers.map(shQuote).join(' ')}`;
}

/**
 * The script of a last login when a tunnel stops with leftovers no later generation will remove
 * (its last ssh died before moving its bind socket in): daemon-made names only, as above.
 */
export function leftoverScript(leftovers: readonly string[]): string {
  return `${removeLeftovers(leftovers)}; exit 0`;
}

/**
 * Answers `s <id> <path>` lines with `sandboxd-seen <id> d|f|-` until stdin closes or another word
 * (the halt word) arrives, which it leaves in `$c`. `[` is a builtin: no path reaches an argv.
 * In a tunnel's directory, `v <id>` asks whether `agent.sock` still leads to the socket this
 * generation published (`d`) or not (`-`): no container can change the directory (it is mounted
 * read-only), but a bridge checks its socket all the same (DESIGN §9).
 */
export function queryLoop(): string {
  const verify = `"v "*) k=\${c#v }; if [ agent.sock -ef .bound ] && [ -S .bound ]; then t=d; else t=-; fi; echo "${SEEN_MARKER} $k $t";;`;
  return `c=''; while IFS= read -r c; do case "$c" in "s "*) q=\${c#s }; k=\${q%% *}; p=\${q#* }; if [ -d "$p" ]; then t=d; elif [ -e "$p" ]; then t=f; else t=-; fi; echo "${SEEN_MARKER} $k $t";; ${verify} *) break;; esac; done`;
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

/** The login part shared by the tunnel and a one-off probe; no shell anywhere on the host side (DESIGN §9). */
export function sshLoginArgs(options: SshOptions): string[] {
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
    '-o', 'ControlMaster=no',
    '-o', 'ControlPath=none',
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

/** argv for `ssh -R`: the remote command is the fixed stub; `remoteScript` goes on stdin. */
export function sshArgs(options: SshOptions & { agentSocket: string; layout: TunnelLayout }): string[] {
  return [
    ...sshLoginArgs(options),
    '-o', 'ExitOnForwardFailure=yes',
    '-R', `${options.layout.bindPath}:${options.agentSocket}`,
    '--',
    destination(options.connection),
    REMOTE_STUB,
  ];
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
