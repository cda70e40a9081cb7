import { existsSync } from 'node:fs';
import os from 'node:os';
import type { Engine } from '../../shared/contracts/common.js';
import { SandboxdError } from '../../shared/errors.js';
import { applyPlan, type SkippedPlanArgs } from '../apply-plan.js';
import type { ConnectionOptions } from '../connection.js';
import { acquireSession, type Session } from '../session.js';
import { fallsBack, OPTED_OUT, type FallbackCode } from './fallback.js';
import { CREDENTIAL_SOCKET_ENV, llxprtSettings } from './settings.js';

export { FALLBACK_CODES, OPTED_OUT, type FallbackCode } from './fallback.js';

export interface LlxprtSandboxOptions extends ConnectionOptions {
  engine: Engine;
  /** The `run …` argument list llxprt built for its own path (image and command included). */
  args: string[];
  /** llxprt's environment (default process.env): its settings, SSH_AUTH_SOCK, PATH, SANDBOXD_*. */
  env?: NodeJS.ProcessEnv;
  /** The directory llxprt mounts as the work tree (default process.cwd()). */
  cwd?: string;
  /** llxprt's own SANDBOX_SET_UID_GID decision, when it computed one (else the variable is read). */
  setUidGid?: boolean;
}

export interface LlxprtSandboxUsed {
  used: true;
  /** `args` with sandboxd's plan merged in: spawn `<engine> ...globalArgs ...args`. */
  args: string[];
  /** Engine arguments that go before `run` (e.g. `--connection NAME`). */
  globalArgs: string[];
  /** Merge into the engine's environment: `spawn(engine, …, { env: { ...process.env, ...spawnEnv } })`. */
  spawnEnv: Record<string, string>;
  /** The container's SSH_AUTH_SOCK is sandboxd's forwarded agent. */
  sshForwarded: boolean;
  warnings: string[];
  /** Plan arguments left out because llxprt's own arguments already set the same thing. */
  skipped: SkippedPlanArgs[];
  /** Ends the session (idempotent). A process that exits first is reaped by the daemon within seconds. */
  release(): Promise<void>;
}

export interface LlxprtSandboxFallback {
  used: false;
  code: FallbackCode;
  reason: string;
}

export type LlxprtSandbox = LlxprtSandboxUsed | LlxprtSandboxFallback;

function fallback(code: FallbackCode, reason: string): LlxprtSandboxFallback {
  return { used: false, code, reason };
}

/** Warnings about the part of llxprt's own setup that kept sandboxd's from taking effect. */
function conflictWarnings(skipped: readonly SkippedPlanArgs[]): string[] {
  const shadowed = skipped.filter((entry) => entry.kind === 'env' && (entry.key === 'SSH_AUTH_SOCK' || entry.key === CREDENTIAL_SOCKET_ENV));
  return shadowed.map((entry) => `llxprt's run arguments set ${entry.key} themselves, so sandboxd's forwarded socket is not used; leave llxprt's own forwarding to the fallback path`);
}

function merge(session: Session, options: LlxprtSandboxOptions, settingsWarnings: string[], warnIfAgentSkipped: boolean): LlxprtSandboxUsed {
  const applied = applyPlan(options.args, session.plan);
  const { ssh } = session.info;
  const agentShadowed = applied.skipped.some((entry) => entry.kind === 'env' && entry.key === 'SSH_AUTH_SOCK');
  const sshForwarded = ssh.status === 'forwarded' && !agentShadowed;
  const agentWarnings = warnIfAgentSkipped && ssh.status === 'skipped' ? [`SSH agent forwarding is on but ${ssh.reason}; continuing without it`] : [];
  return {
    used: true,
    args: applied.args,
    globalArgs: applied.globalArgs,
    spawnEnv: applied.spawnEnv,
    sshForwarded,
    warnings: [...settingsWarnings, ...agentWarnings, ...session.plan.warnings, ...conflictWarnings(applied.skipped)],
    skipped: applied.skipped,
    release: () => session.release(),
  };
}

/**
 * The drop-in for llxprt's launcher (docs/integrations/llxprt.md): reads llxprt's own settings,
 * acquires a sandboxd session and merges its plan into llxprt's `run` arguments. Resolves to
 * `used: false` with a code when llxprt should take its built-in path (FALLBACK_CODES); rejects
 * with the SandboxdError when the launch itself cannot work.
 */
export async function prepareLlxprtSandbox(options: LlxprtSandboxOptions): Promise<LlxprtSandbox> {
  const env = options.env ?? process.env;
  const userInfo = os.userInfo();
  const settings = llxprtSettings(env, { uid: userInfo.uid, gid: userInfo.gid, home: env.HOME ?? userInfo.homedir, exists: existsSync }, options.setUidGid);
  if (settings.optedOut) return fallback(OPTED_OUT, 'LLXPRT_SANDBOXD=0: sandboxd is not used');
  let session: Session | null = null;
  try {
    session = await acquireSession({
      ...(options.autoStart === undefined ? {} : { autoStart: options.autoStart }),
      ...(options.daemonCommand === undefined ? {} : { daemonCommand: options.daemonCommand }),
      env,
      engine: options.engine,
      cwd: options.cwd ?? process.cwd(),
      label: 'llxprt',
      sshAgent: settings.sshAgent,
      containerUser: settings.containerUser,
      mounts: settings.mounts,
      sockets: settings.sockets,
      workdir: false,
    });
    return merge(session, options, settings.warnings, settings.warnIfAgentSkipped);
  } catch (error) {
    await session?.release().catch(() => undefined);
    if (!(error instanceof SandboxdError)) return fallback('INTERNAL', `sandboxd failed unexpectedly: ${error instanceof Error ? error.message : String(error)}`);
    if (fallsBack(error.code)) return fallback(error.code, error.message);
    throw error;
  }
}
