import type { Command } from 'commander';
import { acquireSession, type Session } from '../../session.js';
import { withProgress } from '../progress.js';
import { printJson, runAction } from '../output.js';
import { addSessionOptions, sessionEngine, toAcquireOptions, type SessionFlags } from '../session-options.js';

/** Quotes for a POSIX shell only where needed, so the printed line can be pasted. */
export function shellQuote(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'\\''`)}'`;
}

/** The hosts whose https credentials the sandbox's git may ask the host for, and how. */
function gitCredentialsLines(status: Session['gitCredentials']): string[] {
  if (status === null) return [];
  const hosts = status.hosts.join(', ');
  return [status.status === 'served' ? `git credentials: ${hosts} (get only, ${status.bridge}, ${status.socket})` : `git credentials: ${hosts} not served (${status.reason})`];
}

export function registerPlanCommand(program: Command): void {
  addSessionOptions(
    program
      .command('plan')
      .description('acquire a session, print its plan (mounts, env, run args), release it')
      .option('--no-workdir', 'leave out the mount of the current directory and --workdir, as `run --no-workdir` does')
      .option('--workdir', 'include them (the default, as for `run`)')
      .option('--image <image>', 'the image the container will run (accepted and unused: sandboxd verifies an agent socket with its own image)'),
  ).action(async (flags: SessionFlags & { image?: string }) => {
    const json = flags.json === true;
    await runAction(json, async () => {
      const engine = await sessionEngine(flags);
      const session = await withProgress(
        'preparing the session (starting the daemon, a tunnel or an engine probe)',
        // What `run` adds, the work tree included, unless asked not to.
        acquireSession({ ...toAcquireOptions(flags, engine), workdir: flags.workdir ?? true, heartbeat: false, image: flags.image }),
      );
      try {
        if (json) {
          printJson({ session: session.info, plan: session.plan, sockets: session.sockets, gitCredentials: session.gitCredentials });
          return 0;
        }
        const { ssh } = session.info;
        const lines = [
          `ssh agent: ${ssh.status === 'forwarded' ? `forwarded (${ssh.bridge}, ${ssh.hostAgentSocket} -> ${ssh.socket})` : `skipped (${ssh.reason})`}`,
          ...session.sockets.map((socket) =>
            socket.status === 'forwarded'
              ? `socket ${socket.name}: forwarded (${socket.bridge}, ${socket.hostSocket} -> ${socket.socket}${socket.env === null ? '' : `, $${socket.env}`})`
              : `socket ${socket.name}: skipped (${socket.reason})`,
          ),
          ...gitCredentialsLines(session.gitCredentials),
          'mounts:',
          ...session.plan.mounts.map((m) => `  ${m.source} -> ${m.target}${m.readOnly ? ' (ro)' : ''}  [${m.purpose}]`),
          'env:',
          ...Object.entries(session.plan.env).map(([name, value]) => `  ${name}=${value}`),
          ...session.plan.warnings.map((warning) => `warning: ${warning}`),
          ...session.plan.notices.map((notice) => `notice: ${notice}`),
          `run args: ${session.plan.args.map(shellQuote).join(' ')}`,
        ];
        process.stdout.write(`${lines.join('\n')}\n`);
        return 0;
      } finally {
        await session.release();
      }
    });
  });
}
