import { spawn } from 'node:child_process';
import { constants as osConstants } from 'node:os';
import type { Command } from 'commander';
import { SandboxdError } from '../../../shared/errors.js';
import type { ContainerUser, SessionGit, SessionInfo } from '../../../shared/contracts/sessions.js';
import { AGENT_NOT_FORWARDED, type Plan } from '../../../shared/contracts/plan.js';
import { applyPlan } from '../../apply-plan.js';
import { parseRunArgs } from '../../run-args.js';
import { acquireSession } from '../../session.js';
import { reportError, runAction } from '../output.js';
import { withProgress } from '../progress.js';
import { addSessionOptions, numericUser, sessionEngine, toAcquireOptions, type SessionFlags } from '../session-options.js';

const FORWARDED_SIGNALS: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'];

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

/** Runs `<engine> run <plan args> <run args>` attached to this terminal; resolves to its exit code. */
function runEngine(engine: string, args: string[], env: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    // Values of `-e NAME` travel here, in the engine's environment, never on its command line.
    const child = spawn(engine, args, { stdio: 'inherit', env: { ...process.env, ...env } });
    const forward = (signal: NodeJS.Signals): void => {
      child.kill(signal);
    };
    for (const signal of FORWARDED_SIGNALS) process.on(signal, forward);
    const detach = (): void => {
      for (const signal of FORWARDED_SIGNALS) process.off(signal, forward);
    };
    child.once('error', (error: NodeJS.ErrnoException) => {
      detach();
      if (error.code === 'ENOENT') {
        reject(new SandboxdError('ENGINE_NOT_FOUND', `${engine} was not found on PATH (${process.env.PATH ?? ''})`, {
          remedy: `Install ${engine} or add its directory to PATH.`,
        }));
      } else reject(error);
    });
    child.once('exit', (code, signal) => {
      detach();
      resolve(code ?? 128 + (signal === null ? 1 : osConstants.signals[signal]));
    });
  });
}

/**
 * What a person should know before the container starts: on stderr, so the container's output
 * stays its own. Each reason once: the plan's warning about the skipped agent repeats the reason
 * before its remedy, so it is printed as the remedy under the reason.
 */
export function planNotices(ssh: SessionInfo['ssh'], warnings: readonly string[]): string {
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

export function registerRunCommand(program: Command): void {
  addSessionOptions(
    program
      .command('run')
      .description('acquire a session and run `<engine> run <plan args> <run args…>`; exits with the engine\'s code')
      .argument('<run-args...>', 'arguments for `<engine> run`, after `--` (image, command…)')
      .usage('[--engine podman|docker] [options] -- <run args…>')
      .option('--no-workdir', 'do not mount the current directory or make it the working directory')
      .option('-q, --quiet', 'do not print the plan\'s warnings or why the agent was skipped'),
  ).action(async (runArgs: string[], flags: SessionFlags & { quiet?: boolean }) => {
    const json = flags.json === true;
    await runAction(json, async () => {
      const engine = await sessionEngine(flags);
      const options = toAcquireOptions(flags, engine);
      const user = flags.containerUser === undefined ? userFromRunArgs(runArgs, flags.containerHome) : undefined;
      const image = imageFromRunArgs(runArgs);
      const session = await withProgress(
        'preparing the session (starting the daemon, a tunnel or an engine probe)',
        acquireSession({ ...options, containerUser: user ?? options.containerUser, image }),
      );
      if (flags.quiet !== true) process.stderr.write(planNotices(session.info.ssh, session.plan.warnings));
      let code: number;
      try {
        code = await runEngine(engine, engineCommand(session.plan, runArgs), session.plan.spawnEnv);
      } catch (error) {
        code = reportError(error, json);
      }
      process.stderr.write(gitNotices(await session.release().catch(() => null)));
      return code;
    });
  });
}
