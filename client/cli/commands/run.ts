import type { Command } from 'commander';
import { SandboxdError } from '../../../shared/errors.js';
import type { ContainerUser, SessionGit, SessionInfo } from '../../../shared/contracts/sessions.js';
import type { Plan } from '../../../shared/contracts/plan.js';
import { AGENT_NOT_FORWARDED } from '../../../shared/agent-warning.js';
import { applyPlan } from '../../apply-plan.js';
import { parseRunArgs } from '../../run-args.js';
import { removeSession } from '../../admin.js';
import { acquireSession, type Session } from '../../session.js';
import { runEngine, signalExitCode, SignalInbox, type EngineRun } from '../engine-run.js';
import { unknownOptionHint } from '../program.js';
import { reportError, runAction } from '../output.js';
import { withProgress } from '../progress.js';
import { addSessionOptions, numericUser, sessionEngine, toAcquireOptions, type SessionFlags } from '../session-options.js';

/**
 * The container user as `run`'s own `--user`/`-u` states it, so it need not be given twice. Run
 * args sandboxd cannot read leave the choice to --container-user (default root).
 */
function userFromRunArgs(runArgs: readonly string[], home: string | undefined): ContainerUser | undefined {
  try {
    const value = parseRunArgs(runArgs).options.filter((option) => option.name === 'user').at(-1)?.value;
    return value === undefined || value === null ? undefined : numericUser(value, home);
  } catch {
    return undefined;
  }
}

/** The image in `run`'s own arguments (where its options end); the daemon accepts it and no longer probes with it. */
function imageFromRunArgs(runArgs: readonly string[]): string | undefined {
  try {
    const { optionsEnd } = parseRunArgs(runArgs);
    return runArgs[runArgs[optionsEnd] === '--' ? optionsEnd + 1 : optionsEnd];
  } catch {
    return undefined;
  }
}

/**
 * `run` with the plan merged in: the user's own run arguments win where both set the same thing (a
 * second mount on one target would make the engine exit 125). Run arguments sandboxd cannot read
 * get the plan spliced in front of them, as before.
 */
function engineCommand(plan: Plan, runArgs: readonly string[]): string[] {
  try {
    const applied = applyPlan(['run', ...runArgs], plan);
    return [...applied.globalArgs, ...applied.args];
  } catch (error) {
    if (!(error instanceof SandboxdError && error.code === 'RUN_ARGS_UNPARSABLE')) throw error;
    return [...plan.globalArgs, 'run', ...plan.args, ...runArgs];
  }
}

/**
 * What a person should know before the container starts: on stderr, so the container's output
 * stays its own. Each reason once: the plan's warning about the skipped agent repeats the reason
 * before its remedy, so it is printed as the remedy under the reason.
 */
export function planNotices(ssh: SessionInfo['ssh'] | { status: 'forwarded' }, warnings: readonly string[]): string {
  const lines: string[] = [];
  let rest = warnings;
  if (ssh.status === 'skipped') {
    const prefix = `${AGENT_NOT_FORWARDED}${ssh.reason}`;
    const repeated = warnings.find((warning) => warning.startsWith(prefix));
    const remedy = repeated?.slice(prefix.length).replace(/^\.?\s*/, '');
    lines.push(`sandboxd: ssh agent not forwarded: ${ssh.reason}`, ...(remedy === undefined || remedy === '' ? [] : [`  ${remedy}`]));
    rest = warnings.filter((warning) => warning !== repeated);
  }
  lines.push(...rest.map((warning) => `sandboxd: warning: ${warning}`));
  return lines.map((line) => `${line}\n`).join('');
}

/**
 * What the sandbox's git work left waiting when the session ended: each ref that was not applied
 * to your repository, why, and the command that takes it in. Said whatever --quiet says: it is not
 * a success to keep quiet about.
 */
export function gitNotices(git: SessionGit | null): string {
  if (git === null) return '';
  const lines: string[] = [];
  if (git.error !== null) lines.push(`sandboxd: the sandbox's git work in ${git.repository} was not brought home: ${git.error}`);
  for (const held of git.held) {
    lines.push(`sandboxd: the sandbox's ${held.ref} was not applied: ${held.reason}${held.keptAs === null ? '' : `; it is kept as ${held.keptAs}`}`);
    if (held.command !== null) lines.push(`  to take it in: ${held.command}`);
  }
  for (const note of git.notes) lines.push(`sandboxd: ${note}`);
  return lines.map((line) => `${line}\n`).join('');
}

/**
 * Writes `text` to stderr unless it is empty: Node makes process.stderr on its first use, a cost
 * a quiet `run` with nothing to say need not pay (output.ts, guardClosedPipes).
 */
function say(text: string): void {
  if (text !== '') process.stderr.write(text);
}

/** `-d`: the session lives as long as `run` does, so the container cannot outlive it detached. */
function refuseDetach(runArgs: readonly string[]): void {
  let detached = false;
  try {
    detached = parseRunArgs(runArgs).options.some((option) => option.name === 'detach' && option.value !== 'false');
  } catch {
    return;
  }
  if (detached) {
    throw new SandboxdError('USAGE', 'sandboxd run keeps the session (the agent, git) for as long as the container runs, so it cannot detach (-d)', {
      remedy: 'Run it in the background from your shell instead: `sandboxd run -- … &`.',
    });
  }
}

/**
 * Ends the session once the engine client is gone. After a signal the container may outlive its
 * client (`podman run -it` exits on SIGINT and leaves it running), so it is stopped and removed
 * first; otherwise the session is released, and the daemon removes a container that never
 * started or has exited (sessions.md). Resolves to what of the sandbox's git work was left waiting.
 */
async function endSession(session: Session, removeContainer: boolean): Promise<SessionGit | null> {
  if (removeContainer) await removeSession(session.id).catch(() => undefined);
  return session.release().catch(() => null);
}

/** Ends `run` as the signal would have: by it, so a calling shell sees what it sent. */
function dieBy(signal: NodeJS.Signals, inbox: SignalInbox): number {
  inbox.close();
  // SIGQUIT's default dumps core; the other three end the process as they would have ended it.
  if (signal !== 'SIGQUIT') process.kill(process.pid, signal);
  return signalExitCode(signal);
}

export function registerRunCommand(program: Command): void {
  const command = addSessionOptions(
    program
      .command('run')
      .description('acquire a session and run `<engine> run <plan args> <run args…>`; exits with the engine\'s code')
      .argument('<run-args...>', 'arguments for `<engine> run`, after `--` (image, command…)')
      .usage('[--engine podman|docker] [options] -- <run args…>')
      .option('--no-workdir', 'do not mount the current directory or make it the working directory')
      .option('-q, --quiet', 'do not print the plan\'s warnings or why the agent was skipped'),
  );
  unknownOptionHint(command, 'the engine\'s run arguments go after `--`: sandboxd run [options] -- --rm -it IMAGE');
  command.action(async (runArgs: string[], flags: SessionFlags & { quiet?: boolean }) => {
    const json = flags.json === true;
    // From the first moment: a Ctrl-C while the session is acquired must not leave it held.
    const inbox = new SignalInbox();
    inbox.listen((signal, count) => {
      // A second signal before the engine runs: out now (the daemon reaps the lease of a dead client).
      if (count > 1) process.exit(signalExitCode(signal));
    });
    await runAction(json, async () => {
      refuseDetach(runArgs);
      const engine = await sessionEngine(flags);
      const options = toAcquireOptions(flags, engine);
      const user = flags.containerUser === undefined ? userFromRunArgs(runArgs, flags.containerHome) : undefined;
      const image = imageFromRunArgs(runArgs);
      const session = await withProgress(
        'preparing the session (starting the daemon, a tunnel or an engine probe)',
        acquireSession({ ...options, containerUser: user ?? options.containerUser, image }),
      );
      const early = inbox.received[0];
      if (early !== undefined) {
        await session.release().catch(() => undefined);
        return dieBy(early, inbox);
      }
      // An agent the caller turned off is no news: only the warnings are said then.
      const ssh = flags.sshAgent === 'off' ? { status: 'forwarded' as const } : session.info.ssh;
      if (flags.quiet !== true) say(planNotices(ssh, session.plan.warnings));
      // What sandboxd set that needs no action: asked for with -v (and silenced with the rest by -q).
      if (flags.verbose === true && flags.quiet !== true) say(session.plan.notices.map((notice) => `sandboxd: notice: ${notice}\n`).join(''));
      let result: EngineRun;
      try {
        result = await runEngine({
          engine,
          args: engineCommand(session.plan, runArgs),
          env: session.plan.spawnEnv,
          inbox,
          stopContainer: () => removeSession(session.id).then(() => undefined),
        });
      } catch (error) {
        const git = await endSession(session, true);
        inbox.close();
        const code = reportError(error, json);
        say(gitNotices(git));
        return code;
      }
      // A forced stop removed the container already.
      say(gitNotices(await endSession(session, result.forcedBy === null && (result.interrupted || result.exit.signal !== null))));
      const signal = result.forcedBy ?? result.exit.signal;
      if (signal !== null) return dieBy(signal, inbox);
      inbox.close();
      return result.exit.code ?? 1;
    });
  });
}
