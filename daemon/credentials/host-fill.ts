import type { RunSubprocess } from '../os/subprocess.js';
import { clip } from '../os/text.js';
import { fillInput, parseFillOutput, type CredentialAnswer, type CredentialQuery } from './credential-request.js';

/** A helper that has not answered by then is waiting on something (a prompt, the network): the sandbox's git gives up too. */
export const FILL_TIMEOUT_MS = 15_000;
/** A username and a token are a few hundred bytes; a helper printing more is not answering. */
export const FILL_OUTPUT_BYTES = 16 * 1024;

/** The session's host-side git: the user's HOME and XDG_CONFIG_HOME, the client's PATH. */
export interface FillContext {
  hostHome: string;
  path: string;
  xdgConfigHome?: string;
}

export type FillResult = { ok: true; answer: CredentialAnswer } | { ok: false; reason: string };

/**
 * Never interactive: git's own prompt is off (GIT_TERMINAL_PROMPT=0), helpers are told so
 * (`credential.interactive=never`, Git Credential Manager's GCM_INTERACTIVE), no askpass program
 * is in the environment (the daemon's own is never passed on), stdin is the query alone and the
 * process has no controlling terminal, so a helper that wants to ask someone fails instead.
 */
export function fillEnv(context: FillContext): Record<string, string> {
  return {
    HOME: context.hostHome,
    PATH: context.path,
    ...(context.xdgConfigHome === undefined ? {} : { XDG_CONFIG_HOME: context.xdgConfigHome }),
    GIT_TERMINAL_PROMPT: '0',
    GCM_INTERACTIVE: 'never',
  };
}

/**
 * Asks the user's own git, as the user and with the user's whole config (system included: a Mac's
 * osxkeychain is set there), for the credential of one checked query.
 */
export async function hostFill(run: RunSubprocess, context: FillContext, query: CredentialQuery): Promise<FillResult> {
  const result = await run('git', ['-c', 'credential.interactive=never', 'credential', 'fill'], {
    env: fillEnv(context),
    clientCwd: '/',
    timeoutMs: FILL_TIMEOUT_MS,
    input: fillInput(query),
    detached: true,
    maxOutputBytes: FILL_OUTPUT_BYTES,
  });
  if (result.exitCode === null) {
    // Killed at its bounds, or it never ran (no git on the client's PATH): the runner's reason then.
    const why = result.stderr.split('\n').find((text) => text.trim() !== '');
    return { ok: false, reason: `the host's git credential fill did not finish (at most ${String(FILL_TIMEOUT_MS / 1000)} s and ${String(FILL_OUTPUT_BYTES)} bytes of output)${why === undefined ? '' : `: ${clip(why, 200)}`}` };
  }
  if (result.exitCode !== 0) {
    const line = result.stderr.split('\n').find((text) => text.trim() !== '') ?? `exit ${String(result.exitCode)}`;
    return { ok: false, reason: `the host's git credential fill failed: ${clip(line, 200)}` };
  }
  const answer = parseFillOutput(result.stdout);
  return answer === null ? { ok: false, reason: "the host's credential helpers gave no username and password" } : { ok: true, answer };
}
