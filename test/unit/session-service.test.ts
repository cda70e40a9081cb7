import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SandboxdError } from '../../shared/errors.js';
import { AcquireRequest, type AcquireRequest as AcquireRequestBody } from '../../shared/contracts/sessions.js';
import { systemClock } from '../../daemon/os/clock.js';
import { createLogger } from '../../daemon/os/logger.js';
import type { GitHostFacts } from '../../daemon/plan/git/git-host.js';
import type { ServedAgent } from '../../daemon/bridges/bridge.js';
import type { ContainerSite } from '../../daemon/podman/engine-site.js';
import { SessionRegistry } from '../../daemon/sessions/session-registry.js';
import { SessionService, type SessionServiceDeps } from '../../daemon/sessions/session-service.js';
import { Cleanup } from '../helpers.js';
import { fakeProbe } from './fake-probe.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

const CLIENT_PID = 4242;
const GIT: GitHostFacts = { configs: [], files: [], namedPaths: [], plainHomeFiles: [], configWatched: [], overrides: null, knownHosts: [], repo: null, git: '/usr/bin/git', warnings: [] };

/** A repository's facts, as far as the acquire passes them on (the sandbox git dir is a fake here). */
function inRepository(dir: string): GitHostFacts {
  const repo = { topLevel: dir, gitDir: path.join(dir, '.git'), commonDir: path.join(dir, '.git'), kind: 'plain', outer: { commonDir: path.join(dir, '.git') }, includes: [], pendingIncludes: [], hooksPaths: [] };
  return { ...GIT, repo: repo as unknown as GitHostFacts['repo'] };
}
const LOCAL: ContainerSite = { globalArgs: [], warnings: [], visible: (mounts) => Promise.resolve({ mounts, warnings: [] }) };

function deferred<T>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve: (value: T) => void = () => undefined;
  const promise = new Promise<T>((done) => {
    resolve = done;
  });
  return { promise, resolve };
}

/** Lets every callback already due run: timers of 0 ms come after the I/O and microtasks before them. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 0));

/** An agent whose bridge is served only once `released` settles: what an acquire does meanwhile shows. */
function servedOnceReleased(released: Promise<unknown>, events: string[], served: ServedAgent): SessionServiceDeps['ssh'] {
  return {
    inspect: () => Promise.resolve({ usable: true, realpath: '/tmp/agent.sock', keys: 1 }),
    serve: async () => {
      await released;
      events.push('bridge served');
      return served;
    },
  };
}

/**
 * SessionService over fakes that log each call in `events`: the agent is served by a bridge whose
 * lease logs its release, the container record and the sandbox's git dir log theirs.
 */
function service(overrides: (log: { events: string[]; served: ServedAgent }) => Partial<SessionServiceDeps> = () => ({})) {
  const dir = realpathSync(mkdtempSync(path.join(tmpdir(), 'sbx-acquire-')));
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  const events: string[] = [];
  const probe = fakeProbe(true);
  probe.processes.set(CLIENT_PID, 'started-1');
  const logger = createLogger({ kind: 'silent' });
  const registry = new SessionRegistry({ clock: systemClock, probe, leaseTtlMs: 30_000, sweepIntervalMs: 10_000, maxSessions: 10, logger });
  const served: ServedAgent = {
    lease: { bridgeId: 'b1', release: () => events.push('lease released') },
    kind: 'mount',
    mountSource: dir,
    relabel: undefined,
    flags: [],
    warnings: [],
  };
  const deps: SessionServiceDeps = {
    platform: 'linux',
    hostHome: dir,
    emptyDir: dir,
    clock: systemClock,
    probe,
    registry,
    ssh: {
      inspect: () => Promise.resolve({ usable: true, realpath: path.join(dir, 'agent.sock'), keys: 1 }),
      serve: () => {
        events.push('bridge served');
        return Promise.resolve(served);
      },
    },
    gitFacts: () => {
      events.push('git facts');
      return Promise.resolve(GIT);
    },
    privacy: {
      check: () => {
        events.push('privacy checked');
        return Promise.resolve();
      },
      explain: (_dir, error) => error,
    },
    gitSync: {
      hold: () => {
        events.push('git dir held');
        return Promise.reject(new Error('no repository in these tests'));
      },
      drop: () => {
        events.push('git dir dropped');
      },
      status: () => null,
      assertRenewable: () => undefined,
    },
    writeGitConfig: () => Promise.resolve(path.join(dir, 'gitconfig')),
    containers: {
      prepare: (request) => {
        events.push('record written');
        return Promise.resolve({ flags: [], container: { id: null, cidfile: path.join(dir, `${request.sessionId}.cid`) } });
      },
      abandon: () => {
        events.push('record abandoned');
        return Promise.resolve();
      },
    },
    site: () => Promise.resolve(LOCAL),
    userEngine: () => Promise.resolve({ kind: 'other' }),
    hostUser: { uid: 1001, gid: 1001 },
    leaseTtlMs: 30_000,
    ...overrides({ events, served }),
  };
  const acquire = (body: Partial<AcquireRequestBody> = {}) =>
    new SessionService(deps).acquire(AcquireRequest.parse({ engine: 'docker', client: { pid: CLIENT_PID, cwd: dir, sshAuthSock: path.join(dir, 'agent.sock') }, ...body }));
  return { dir, events, registry, served, acquire };
}

describe('SessionService.acquire', () => {
  it('maps the user onto a non-root container user of rootless Podman and says so as a notice, not a warning', async () => {
    const { acquire } = service(() => ({ userEngine: () => Promise.resolve({ kind: 'rootless-podman', version: 'podman version 4.3.1' }) }));
    const answer = await acquire({ engine: 'podman', containerUser: { uid: 1000, gid: 1000 }, workdir: true, allowWideWorkdir: true });
    expect(answer.plan.flags).toContain('--userns=keep-id:uid=1000,gid=1000');
    expect(answer.plan.args).toContain('--userns=keep-id:uid=1000,gid=1000');
    expect(answer.plan.notices).toContain('podman: you (uid 1001) are uid 1000 in the container (--userns=keep-id:uid=1000,gid=1000), so it writes the work tree as you');
    expect(answer.plan.warnings.some((warning) => warning.includes('keep-id'))).toBe(false);
  });

  it('an engine that does not answer when asked fails the acquire: no plan for a run that cannot start', async () => {
    const down = new SandboxdError('DOCKER_INFO_FAILED', 'the Docker engine did not answer `docker info`: Cannot connect to the Docker daemon');
    const { events, registry, acquire } = service(() => ({ userEngine: () => Promise.reject(down) }));
    await expect(acquire({ sshAgent: 'off' })).rejects.toBe(down);
    expect(registry.size).toBe(0);
    expect(events).toContain('record abandoned');
  });

  it('registers the session with its bridge leases and answers its plan', async () => {
    const { events, registry, acquire } = service();
    const answer = await acquire();
    expect(answer.session.ssh).toMatchObject({ status: 'forwarded', bridge: 'mount' });
    expect(registry.size).toBe(1);
    expect(events).not.toContain('lease released');
    expect(events.filter((event) => event.startsWith('record') || event.startsWith('git dir'))).toEqual(['record written']);
  });

  it('checks the request before any bridge is held: a missing cwd before the privacy gate, a bad mount before the bridges', async () => {
    const missing = service();
    await expect(missing.acquire({ client: { pid: CLIENT_PID, cwd: path.join(missing.dir, 'gone') } })).rejects.toMatchObject({ code: 'BAD_REQUEST' });
    expect(missing.events).toEqual([]);
    const badMount = service();
    await expect(badMount.acquire({ mounts: [path.join(badMount.dir, 'gone')] })).rejects.toMatchObject({ code: 'INVALID_MOUNT' });
    expect(badMount.events).toEqual(['privacy checked']);
  });

  it('passes the privacy gate before git reads the repository', async () => {
    const { events, acquire } = service();
    await acquire();
    const order = ['privacy checked', 'git facts'].map((event) => events.indexOf(event));
    expect(order).toEqual([...order].sort((a, b) => a - b));
    expect(order).not.toContain(-1);
  });

  it.each([
    ['a new session writes its container record while its bridges are being taken', undefined, true],
    ["a renewal writes it only once its bridges are held (one that fails takes over nothing)", 'ses_previous0001', false],
  ])('%s', async (_what, renews, before) => {
    const bridge = deferred<null>();
    const gitAsked = deferred<null>();
    const { events, acquire } = service(({ events, served }) => ({
      ssh: servedOnceReleased(bridge.promise, events, served),
      gitFacts: () => {
        gitAsked.resolve(null);
        return Promise.resolve(GIT);
      },
    }));
    const answer = acquire(renews === undefined ? {} : { renews });
    await gitAsked.promise;
    await settle();
    expect(events.includes('record written')).toBe(before);
    bridge.resolve(null);
    await answer;
    const order = events.filter((event) => event === 'record written' || event === 'bridge served');
    expect(order).toEqual(before ? ['record written', 'bridge served'] : ['bridge served', 'record written']);
  });

  it('gives back what it took, last taken first, when a later step fails', async () => {
    const refused = new Error('the sandbox git dir cannot be made');
    const { events, registry, acquire } = service(({ events }) => ({
      gitFacts: () => Promise.resolve(inRepository('/nonexistent/repo')),
      gitSync: {
        hold: () => Promise.reject(refused),
        drop: () => {
          events.push('git dir dropped');
        },
        status: () => null,
        assertRenewable: () => undefined,
      },
    }));
    await expect(acquire()).rejects.toBe(refused);
    // The bridge and the record are taken at once, in either order; each is given back in reverse.
    const undo = { 'bridge served': 'lease released', 'record written': 'record abandoned' } as const;
    const taken = events.filter((event): event is keyof typeof undo => event in undo);
    expect([...taken].sort()).toEqual(['bridge served', 'record written']);
    const givenBack = events.filter((event) => event === 'git dir dropped' || event === 'record abandoned' || event === 'lease released');
    expect(givenBack).toEqual(['git dir dropped', ...taken.map((event) => undo[event]).reverse()]);
    expect(events.indexOf('git dir dropped')).toBeGreaterThan(Math.max(...taken.map((event) => events.indexOf(event))));
    expect(registry.size).toBe(0);
  });

  it('waits for every branch when two fail, gives back the bridge that arrived late, and leaves no rejection unhandled', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    cleanup.add(() => process.off('unhandledRejection', onUnhandled));
    const bridge = deferred<null>();
    const siteFailed = Object.assign(new Error('no such connection'), { code: 'PODMAN_CONNECTION_NOT_FOUND' });
    const gitFailed = new Error('git cannot read the repository');
    const { events, registry, acquire } = service(({ events, served }) => ({
      site: () => Promise.reject(siteFailed),
      gitFacts: () => Promise.reject(gitFailed),
      ssh: servedOnceReleased(bridge.promise, events, served),
    }));
    let outcome: unknown = 'pending';
    const answer = acquire().then(
      () => 'acquired',
      (error: unknown) => error,
    );
    void answer.then((value) => {
      outcome = value;
    });
    await settle();
    await settle();
    // Both failures are in; the bridge is still being taken, so the acquire has not failed yet.
    expect(outcome).toBe('pending');
    bridge.resolve(null);
    expect(await answer).toBe(siteFailed);
    // The site failed, so no record was written; the bridge that arrived after both failures went back.
    expect(events).toEqual(['privacy checked', 'bridge served', 'lease released']);
    expect(registry.size).toBe(0);
    await settle();
    expect(unhandled).toEqual([]);
  });
});
