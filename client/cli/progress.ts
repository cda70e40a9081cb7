/** Work shorter than this shows nothing: a progress line that flashes is noise. */
export const PROGRESS_AFTER_MS = 1_000;

export interface ProgressStream {
  isTTY?: boolean;
  write(text: string): unknown;
}

/**
 * process.stderr when it is a terminal, else null. Node makes the stream on its first use, which
 * costs a start that never writes (a quiet `run`, whose engine writes to the terminal itself) a
 * few milliseconds: whether fd 2 is a terminal is asked without it.
 */
function terminalStderr(): ProgressStream | null {
  return process.getBuiltinModule('node:tty').isatty(2) ? process.stderr : null;
}

/**
 * Says on stderr what is being waited for once `work` has taken over a second (auto-start, a cold
 * tunnel, an engine probe): only on a terminal, so pipes and logs stay clean. With colour allowed
 * the line is erased when the work ends; under NO_COLOR (no escape sequences) it stays.
 */
export async function withProgress<T>(message: string, work: Promise<T>, given?: ProgressStream, env: NodeJS.ProcessEnv = process.env): Promise<T> {
  const stream = given ?? terminalStderr();
  if (stream?.isTTY !== true) return work;
  const plain = env.NO_COLOR !== undefined && env.NO_COLOR !== '';
  const line = { shown: false };
  const timer = setTimeout(() => {
    line.shown = true;
    stream.write(plain ? `sandboxd: ${message}…\n` : `\x1b[2msandboxd: ${message}…\x1b[0m`);
  }, PROGRESS_AFTER_MS);
  try {
    return await work;
  } finally {
    clearTimeout(timer);
    if (line.shown && !plain) stream.write('\r\x1b[2K');
  }
}
