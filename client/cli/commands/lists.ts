import type { Command } from 'commander';
import type { BridgeInfo } from '../../../shared/contracts/bridges.js';
import type { SessionInfo } from '../../../shared/contracts/sessions.js';
import { listSessions, listTunnels, removeSession, removeTunnel, restartTunnel } from '../../admin.js';
import { TABLE_WIDTH, formatAge, printJson, printTable, runAction, type Column } from '../output.js';

interface ListOptions {
  json?: boolean;
  /** commander's `--no-trunc`: false when given. */
  trunc: boolean;
}

const NO_TRUNC = ['--no-trunc', `print every column whole (by default a table fits ${String(TABLE_WIDTH)} columns)`] as const;

const SESSION_COLUMNS: Column<SessionInfo>[] = [
  { header: 'ID', value: (s) => s.id, whole: true },
  { header: 'ENGINE', value: (s) => s.engine },
  { header: 'LABEL', value: (s) => s.label ?? '-' },
  { header: 'PID', value: (s) => String(s.clientPid) },
  { header: 'AGE', value: (s) => formatAge(s.createdAt) },
  { header: 'SSH', value: (s) => (s.ssh.status === 'forwarded' ? `${s.ssh.bridge} ${s.ssh.bridgeId}` : `skipped: ${s.ssh.reason}`) },
  { header: 'REFUSED', value: (s) => String(s.refused) },
  { header: 'CONTAINER', value: (s) => (s.container === null ? '-' : (s.container.id?.slice(0, 12) ?? 'not started')) },
  { header: 'GIT', value: gitColumn, keepEnd: true },
];

// Where a bridge makes its sessions' sockets, from the pattern it reports (`<dir>/*/agent.sock`, `sandboxd-relay-*:/agent.sock`).
function sessionsDir(socketPath: string): string {
  return socketPath.replace(/(\/\*)?\/agent\.sock$/, '').replace(/:$/, '');
}

/** What the sandbox's git work left waiting: each ref kept on the host, or why nothing comes home. */
function gitColumn(session: SessionInfo): string {
  const { git } = session;
  if (git === null) return '-';
  if (git.error !== null) return `not brought home: ${git.error}`;
  if (git.held.length === 0) return 'synced';
  return `held: ${git.held.map((held) => `${held.keptAs ?? held.ref} (${held.reason})`).join('; ')}`;
}

const TUNNEL_COLUMNS: Column<BridgeInfo>[] = [
  { header: 'ID', value: (t) => t.id, whole: true },
  { header: 'KIND', value: (t) => t.kind },
  { header: 'CONNECTION', value: (t) => t.connection ?? '-' },
  { header: 'STATE', value: (t) => t.state, whole: true },
  { header: 'REFS', value: (t) => String(t.refs) },
  { header: 'REFUSED', value: (t) => String(t.refused) },
  // The ssh's pid is for debugging (--no-trunc, --json): the table's width goes to what bounds refused.
  { header: 'PID', value: (t) => (t.pid === null ? '-' : String(t.pid)), wideOnly: true },
  { header: 'RESTARTS', value: (t) => String(t.restarts) },
  { header: 'AGE', value: (t) => formatAge(t.createdAt) },
  { header: 'AGENT', value: (t) => t.hostAgentSocket, keepEnd: true, wideOnly: true },
  // Each session's `agent.sock` is in a directory of its own inside the bridge's: the bridge's tells them apart.
  { header: 'SOCKETS', value: (t) => sessionsDir(t.socketPath), keepEnd: true, keepLast: true },
  { header: 'LAST ERROR', value: (t) => t.lastError ?? '-' },
];

export function registerListCommands(program: Command): void {
  const sessions = program.command('sessions').description('inspect sessions (leases)');
  sessions
    .command('ls')
    .description('list open sessions')
    .option('--json', 'print a JSON array')
    .option(...NO_TRUNC)
    .action(async (options: ListOptions) => {
      await runAction(options.json === true, async () => {
        const rows = await listSessions();
        if (options.json === true) printJson(rows);
        else printTable(SESSION_COLUMNS, rows, 'no sessions', options.trunc ? TABLE_WIDTH : Infinity);
        return 0;
      });
    });

  sessions
    .command('rm <id>')
    .description('end a session now and stop and remove its container')
    .option('--json', 'print JSON')
    .action(async (id: string, options: { json?: boolean }) => {
      await runAction(options.json === true, async () => {
        const containers = await removeSession(id);
        if (options.json === true) printJson({ removed: true, id, containers });
        else process.stdout.write(`${id} removed${containers.length === 0 ? ' (no container was running)' : `, container ${containers.map((c) => c.slice(0, 12)).join(' ')} removed`}\n`);
        return 0;
      });
    });

  const tunnels = program.command('tunnels').description('inspect and manage agent tunnels and relays');
  tunnels
    .command('ls')
    .description('list tunnels and relays with their state')
    .option('--json', 'print a JSON array')
    .option(...NO_TRUNC)
    .action(async (options: ListOptions) => {
      await runAction(options.json === true, async () => {
        const rows = await listTunnels();
        if (options.json === true) printJson(rows);
        else printTable(TUNNEL_COLUMNS, rows, 'no tunnels', options.trunc ? TABLE_WIDTH : Infinity);
        return 0;
      });
    });
  tunnels
    .command('restart <id>')
    .description('re-create a tunnel or relay; containers keep their mount')
    .option('--json', 'print JSON')
    .action(async (id: string, options: { json?: boolean }) => {
      await runAction(options.json === true, async () => {
        const tunnel = await restartTunnel(id);
        if (options.json === true) printJson(tunnel);
        else process.stdout.write(`${tunnel.id} ${tunnel.state}\n`);
        return 0;
      });
    });
  tunnels
    .command('rm <id>')
    .description('stop a tunnel or relay now; sessions using it lose their agent')
    .option('--json', 'print JSON')
    .action(async (id: string, options: { json?: boolean }) => {
      await runAction(options.json === true, async () => {
        await removeTunnel(id);
        if (options.json === true) printJson({ removed: true, id });
        else process.stdout.write(`${id} removed\n`);
        return 0;
      });
    });
}
