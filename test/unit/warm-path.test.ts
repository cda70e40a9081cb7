import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { acquireSession } from '../../client/index.js';
import { listenOn } from '../../daemon/lifecycle/daemon-socket.js';
import { createSubprocessRunner } from '../../daemon/os/subprocess.js';
import { GIT_FACTS_TTL_MS } from '../../daemon/plan/git/git-host.js';
import { Cleanup, waitFor } from '../helpers.js';
import { ManualTime } from './manual-time.js';
import { memoryDaemon } from './memory-daemon.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

describe('a warm acquire long after the last one', () => {
  it('is answered from what git said before, and git is asked again only afterwards, in the background', async () => {
    const dir = mkdtempSync('/tmp/sbx-warm-');
    cleanup.add(() => {
      rmSync(dir, { recursive: true, force: true });
    });
    const repo = path.join(dir, 'repo');
    mkdirSync(repo);
    execFileSync('git', ['init', '-q', repo]);
    // The daemon's clocks and timers are the test's; its git is real, run by a runner that tells
    // the test of every git it ran.
    const time = new ManualTime();
    let gitRuns = 0;
    const run = createSubprocessRunner({
      observe: (event) => {
        if (path.basename(event.file) === 'git') gitRuns += 1;
      },
    });
    const daemon = memoryDaemon(dir, {}, undefined, { clock: time.clock, timers: time.timers, run });
    cleanup.add(() => daemon.close());
    await daemon.app.ready();
    await listenOn(daemon.app.server, { path: path.join(dir, 'sandboxd.sock') });
    daemon.start();
    // The real client on the real socket; the daemon is already there, so none is auto-started.
    // Its PATH has git and no engine: nothing of this machine's docker or podman is asked.
    const bin = path.join(dir, 'bin');
    mkdirSync(bin);
    symlinkSync(execFileSync('sh', ['-c', 'command -v git'], { encoding: 'utf8' }).trim(), path.join(bin, 'git'));
    const env = { PATH: bin, HOME: dir, SANDBOXD_RUNTIME_DIR: dir, SANDBOXD_STATE_DIR: dir, SANDBOXD_LOG_DIR: dir };
    const acquire = async (): Promise<void> => {
      const session = await acquireSession({ engine: 'docker', env, cwd: repo, sshAgent: 'off', heartbeat: false });
      await session.release();
    };
    // The first answer is computed unstamped; the second, its files stamped first, is the one kept.
    await acquire();
    await acquire();
    const kept = gitRuns;
    expect(kept).toBeGreaterThan(0);
    await time.advance(GIT_FACTS_TTL_MS + 1_000);
    // Older than the TTL, the answer still serves: git does not run while this session is answered.
    await acquire();
    expect(gitRuns).toBe(kept);
    // It is asked again once the daemon has a quiet moment.
    await time.advance(1_000);
    await waitFor(() => gitRuns > kept, 'git to be asked again in the background', 10_000);
  });
});
