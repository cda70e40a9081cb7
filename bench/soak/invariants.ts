import { readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import path from 'node:path';
import type { BridgeInfo, SessionInfo } from '../../client/index.js';

/** What the operating system says, read from /proc: the truth the daemon's view is checked against. */
export function tunnelSshPids(port: number): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      const portAt = argv.indexOf('-p');
      if (path.basename(argv[0] ?? '') === 'ssh' && argv.includes('ControlMaster=yes') && argv[portAt + 1] === String(port)) pids.push(Number(entry));
    } catch {
      // gone while we looked
    }
  }
  return pids;
}

export function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

export function daemonResources(pid: number): { fds: number; rssBytes: number } | null {
  try {
    const fds = readdirSync(`/proc/${pid}/fd`).length;
    const rssPages = Number(readFileSync(`/proc/${pid}/statm`, 'utf8').split(' ')[1]);
    return { fds, rssBytes: rssPages * 4096 };
  } catch {
    return null;
  }
}

/** Generation sockets in the VM-side tunnel dirs (and bind paths beside the root) that still exist. */
export function vmSockets(vmRoots: ReadonlySet<string>): string[] {
  const found: string[] = [];
  for (const root of vmRoots) {
    const parent = path.dirname(root);
    for (const name of safeList(parent)) {
      if (name.startsWith(`${path.basename(root)}.`) && name.endsWith('.sock')) found.push(path.join(parent, name));
    }
    for (const dir of safeList(root)) {
      for (const name of safeList(path.join(root, dir))) {
        if (/^a-.*\.sock$/.test(name)) found.push(path.join(root, dir, name));
      }
    }
  }
  return found;
}

function safeList(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

export interface HeldView {
  sessions: SessionInfo[];
  tunnels: BridgeInfo[];
  sshPids: number[];
}

/**
 * Checked while every client is frozen mid-lease (SIGSTOP): the daemon's counts must match the
 * sessions it holds and the processes that exist. After a daemon was killed, the next one serves
 * the sockets of its predecessor's sessions again until their clients renew (DESIGN §9, kept
 * endpoints), and each holds its tunnel for that one lease: a frozen client has not renewed yet,
 * so there a tunnel may hold more refs than sessions (never fewer), and the quiet check after the
 * phase proves those refs end.
 */
export function heldViolations(view: HeldView, phase: { daemonRestarted: boolean }): string[] {
  const violations: string[] = [];
  const forwarded = view.sessions.filter((session) => session.ssh.status === 'forwarded').length;
  const refs = view.tunnels.reduce((sum, tunnel) => sum + tunnel.refs, 0);
  const mismatch = phase.daemonRestarted ? refs < forwarded : refs !== forwarded;
  if (mismatch) violations.push(`tunnel refs ${String(refs)} ${refs < forwarded ? '<' : '!='} forwarded sessions ${String(forwarded)}`);
  for (const session of view.sessions) {
    if (!alive(session.clientPid)) violations.push(`session ${session.id} of dead client ${String(session.clientPid)}`);
  }
  const tunnelPids = new Set(view.tunnels.map((tunnel) => tunnel.pid).filter((pid) => pid !== null));
  for (const pid of view.sshPids) if (!tunnelPids.has(pid)) violations.push(`orphan ssh ${String(pid)}`);
  const keys = new Map<string, number>();
  for (const tunnel of view.tunnels) keys.set(`${tunnel.connection ?? ''}|${tunnel.hostAgentSocket}`, (keys.get(`${tunnel.connection ?? ''}|${tunnel.hostAgentSocket}`) ?? 0) + 1);
  for (const [key, count] of keys) if (count > 1) violations.push(`${String(count)} tunnels for one key ${key}`);
  return violations;
}

export interface QuietView {
  sessions: SessionInfo[];
  tunnels: BridgeInfo[];
  sshPids: number[];
  sockets: string[];
}

/** Checked once every client stopped and the reaping and idle bounds passed: nothing is left. */
export function quietViolations(view: QuietView): string[] {
  return [
    ...view.sessions.map((session) => `session ${session.id} (client ${String(session.clientPid)}) outlived its client`),
    ...view.tunnels.map((tunnel) => `tunnel ${tunnel.id} (${tunnel.state}, ${String(tunnel.refs)} refs) outlived its idle bound`),
    ...view.sshPids.map((pid) => `ssh ${String(pid)} still runs with no session`),
    ...view.sockets.map((socket) => `stale VM socket ${socket}`),
  ];
}

/**
 * The host's git dir takes no write from a sandbox: no file the planter wrote in the sandbox's git
 * dir appears, with its content, at the same place in the host's.
 */
export function plantedViolations(planted: readonly { planted: string; content: string }[]): string[] {
  return planted
    .filter(({ planted: file, content }) => {
      try {
        return readFileSync(file, 'utf8') === content;
      } catch {
        return false;
      }
    })
    .map(({ planted: file }) => `a sandbox's plant reached the host: ${file}`);
}

/** Names, sizes and mtimes under `dir`, except the daemon's own dirs: the fuzzer must change none. */
export function snapshot(dir: string, skip: ReadonlySet<string>): string {
  const lines: string[] = [];
  const walk = (current: string): void => {
    for (const name of safeList(current).sort()) {
      const full = path.join(current, name);
      if (skip.has(full)) continue;
      try {
        const stat = statSync(full, { throwIfNoEntry: false });
        if (stat === undefined) continue;
        lines.push(`${full} ${String(stat.size)} ${String(stat.mtimeMs)}${stat.isSymbolicLink() ? ` -> ${readlinkSync(full)}` : ''}`);
        if (stat.isDirectory()) walk(full);
      } catch {
        lines.push(`${full} unreadable`);
      }
    }
  };
  walk(dir);
  return lines.join('\n');
}
