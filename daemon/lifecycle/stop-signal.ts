import type { Logger } from '../os/logger.js';

const SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;

/** How the daemon is asked to stop: a signal, `POST /v1/shutdown`, a lost lock or its last session after a drain. */
export class StopSignal {
  private resolveStopped: (code: number) => void = () => undefined;
  private readonly stopped = new Promise<number>((resolve) => {
    this.resolveStopped = resolve;
  });

  constructor(private readonly logger: Logger) {}

  /** Only the first call decides the exit code; each is logged. */
  readonly stop = (reason: string): void => {
    this.resolveStopped(0);
    this.logger.info({ reason }, 'stopping');
  };

  /** Until asked to stop, signals included; answers the exit code. */
  async untilStopped(): Promise<number> {
    const onSignal = (signal: NodeJS.Signals): void => {
      this.stop(signal);
    };
    for (const signal of SIGNALS) process.on(signal, onSignal);
    try {
      return await this.stopped;
    } finally {
      for (const signal of SIGNALS) process.off(signal, onSignal);
    }
  }
}

/** Runs `close`; past `deadlineMs`, `overran` cleans up by hand and exits instead of waiting on. */
export async function closeWithin(close: () => Promise<void>, deadlineMs: number, overran: () => never): Promise<void> {
  const deadline = setTimeout(overran, deadlineMs);
  deadline.unref();
  try {
    await close();
  } finally {
    clearTimeout(deadline);
  }
}
