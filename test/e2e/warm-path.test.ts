import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { acquireSession } from '../../dist/client/index.js';
import { GIT_FACTS_TTL_MS } from '../../daemon/plan/git/git-host.js';
import { Cleanup, cliEnv, makeSandbox, waitFor } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

interface LogLine {
  msg: string;
  sessionId?: string;
  file?: string;
}

describe('a warm acquire minutes after the last one (issue 13)', () => {
  it('is answered from what git said before, and git is asked again only afterwards, in the background', { timeout: 60_000 }, async () => {
    const sandbox = makeSandbox(cleanup);
    const repo = path.join(sandbox.dir, 'repo');
    mkdirSync(repo);
    await execa('git', ['init', '-q', repo]);
    // Auto-started by the first acquire, as clients start it; the debug log lists every subprocess.
    const env = cliEnv(sandbox, { SANDBOXD_LOG_LEVEL: 'debug', SANDBOXD_SSH_BRIDGE: 'mount' });
    const acquire = async (): Promise<string> => {
      const session = await acquireSession({ engine: 'podman', env, cwd: repo, sshAgent: 'off', heartbeat: false });
      await session.release();
      return session.id;
    };
    // The first answer is computed unstamped; the second, its files stamped first, is the one kept.
    await acquire();
    const kept = await acquire();
    await new Promise((resolve) => setTimeout(resolve, GIT_FACTS_TTL_MS + 1_000));
    const late = await acquire();

    const logFile = path.join(sandbox.env.SANDBOXD_LOG_DIR, 'sandboxd.log');
    const lines = (): LogLine[] =>
      readFileSync(logFile, 'utf8')
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as LogLine);
    const acquired = (all: LogLine[], id: string): number => all.findIndex((line) => line.msg === 'session acquired' && line.sessionId === id);
    const gitRuns = (all: LogLine[]): LogLine[] => all.filter((line) => line.msg === 'subprocess' && line.file?.endsWith('/git') === true);
    const log = await waitFor(() => {
      const all = lines();
      return gitRuns(all.slice(acquired(all, late))).length > 0 ? all : null;
    }, 'git to be asked again after the late session was answered');
    // Between the kept answer and the late session's plan, git never ran: its answer was older than
    // the TTL and still served; it was asked again once that session had its plan.
    expect(acquired(log, kept)).toBeGreaterThan(-1);
    expect(gitRuns(log.slice(acquired(log, kept), acquired(log, late)))).toEqual([]);
  });
});
