import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { DesktopRelay, type ContainerWatch } from '../../daemon/bridges/desktop-relay.js';
import { parseRelayStatus, upstreamReason } from '../../daemon/bridges/relay-containers.js';
import { SessionRelays } from '../../daemon/bridges/session-relays.js';
import { HelperRecords, helperRecord } from '../../daemon/bridges/helper-records.js';
import { removeLeftoverHelpers } from '../../daemon/bridges/leftover-helpers.js';
import { createLogger } from '../../daemon/os/logger.js';
import type { RunSubprocess, SubprocessResult } from '../../daemon/os/subprocess.js';
import { Cleanup } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(async () => {
  vi.restoreAllMocks();
  await cleanup.run();
});
const logger = createLogger({ kind: 'silent' });
const NAME = 'sandboxd-relay-0123456789abcdef';
const HUB = 'sandboxd-hub-0123456789abcdef';
const ok = (stdout = ''): SubprocessResult => ({ exitCode: 0, stdout, stderr: '' });

function records(): { file: string; store: HelperRecords } {
  const dir = mkdtempSync('/tmp/sbx-helpers-');
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  const file = path.join(dir, 'helpers.json');
  return { file, store: new HelperRecords(file, logger) };
}

function helpersIn(file: string): unknown[] {
  return (JSON.parse(readFileSync(file, 'utf8')) as { helpers: unknown[] }).helpers;
}

/** Stands in for the docker CLI: answers by subcommand, and remembers each call with its environment. */
function fakeDocker(answers: (args: readonly string[]) => SubprocessResult = () => ok()) {
  const calls: { args: string[]; env: Record<string, string> }[] = [];
  const run: RunSubprocess = (_file, args, options) => {
    calls.push({ args: [...args], env: options.env });
    return Promise.resolve(answers(args));
  };
  return { run, calls, commands: () => calls.map((call) => call.args.join(' ')) };
}

describe('helper records (helpers.json in the state dir)', () => {
  it('keep the relay containers made and not removed, with their docker variables only, across daemons', async () => {
    const { file, store } = records();
    await store.add(helperRecord(NAME, '/usr/bin/docker', { DOCKER_HOST: 'unix:///d.sock', PATH: '/bin', SECRET: 'x' }));
    await store.add(helperRecord('sandboxd-relay-fedcba9876543210', '/usr/bin/docker', {}));
    await store.add(helperRecord(HUB, '/usr/bin/docker', {}));
    await store.forget(['sandboxd-relay-fedcba9876543210']);
    expect(await new HelperRecords(file, logger).load()).toEqual([{ name: NAME, docker: '/usr/bin/docker', env: { PATH: '/bin', DOCKER_HOST: 'unix:///d.sock' } }, { name: HUB, docker: '/usr/bin/docker', env: {} }]);
  });

  it('a record not in sandboxd\'s shape is ignored, never acted on', async () => {
    const { file } = records();
    writeFileSync(file, JSON.stringify({ version: 1, helpers: [{ name: 'victim', docker: '/usr/bin/docker', env: {} }, { name: NAME, docker: 'docker', env: {} }] }));
    expect(await new HelperRecords(file, logger).load()).toEqual([]);
  });
});

describe('the start-up sweep of helpers a killed daemon left', () => {
  it('removes, on each recorded engine, the containers then the volumes with this owner\'s label, and forgets them', async () => {
    const { file, store } = records();
    await store.add(helperRecord(NAME, '/usr/bin/docker', { DOCKER_HOST: 'unix:///a.sock' }));
    await store.add(helperRecord('sandboxd-relay-1111111111111111', '/usr/bin/docker', { DOCKER_HOST: 'unix:///b.sock' }));
    const docker = fakeDocker((args) => (args[0] === 'ps' ? ok(`c1 ${NAME}\nc2 other`) : args[0] === 'volume' && args[1] === 'ls' ? ok(NAME) : ok()));
    await removeLeftoverHelpers({ run: docker.run, owner: 'own', records: store, keep: [], logger });
    const filters = '--filter label=sandboxd.owner=own --filter label=sandboxd.helper';
    const perEngine = [`ps --all --no-trunc --format {{.ID}} {{.Names}} ${filters}`, 'rm --force c1 c2', `volume ls --quiet ${filters}`, `volume rm ${NAME}`];
    expect(docker.commands()).toEqual([...perEngine, ...perEngine]);
    expect(docker.calls.map((call) => call.env.DOCKER_HOST)).toEqual([...perEngine.map(() => 'unix:///a.sock'), ...perEngine.map(() => 'unix:///b.sock')]);
    expect(helpersIn(file)).toEqual([]);
  });

  it('leaves the relays and hub a live session\'s socket still needs (kept across a graceful stop), with their records', async () => {
    const { store } = records();
    await store.add(helperRecord(NAME, '/usr/bin/docker', {}));
    await store.add(helperRecord(HUB, '/usr/bin/docker', {}));
    const docker = fakeDocker((args) => (args[0] === 'ps' ? ok(`c1 ${NAME}\nc2 ${HUB}\nc3 sandboxd-relay-2222222222222222`) : args[1] === 'ls' ? ok(`${NAME}\n${HUB}\nsandboxd-relay-2222222222222222`) : ok()));
    await removeLeftoverHelpers({ run: docker.run, owner: 'own', records: store, keep: [NAME, HUB], logger });
    expect(docker.commands().filter((command) => /^(volume )?rm /.test(command))).toEqual(['rm --force c3', 'volume rm sandboxd-relay-2222222222222222']);
    expect((await store.load()).map((record) => record.name)).toEqual([NAME, HUB]);
  });

  it('keeps the record while a volume is still mounted (the engine refuses) or the engine does not answer', async () => {
    const { file, store } = records();
    await store.add(helperRecord(NAME, '/usr/bin/docker', {}));
    const busy = fakeDocker((args) => (args[1] === 'ls' ? ok(NAME) : args[1] === 'rm' ? { exitCode: 1, stdout: '', stderr: 'volume is in use' } : ok()));
    await removeLeftoverHelpers({ run: busy.run, owner: 'own', records: store, keep: [], logger });
    const down = fakeDocker(() => ({ exitCode: 1, stdout: '', stderr: 'Cannot connect to the Docker daemon' }));
    await removeLeftoverHelpers({ run: down.run, owner: 'own', records: store, keep: [], logger });
    expect(down.commands()).toHaveLength(1);
    expect(await new HelperRecords(file, logger).load()).toHaveLength(1);
  });
});

describe('SessionRelays: a relay container of each session\'s own', () => {
  function relays(answers: (args: readonly string[]) => SubprocessResult = (args) => (args[0] === 'logs' ? ok('sandboxd-relay ready') : ok())) {
    const { file, store } = records();
    const docker = fakeDocker(answers);
    const subject = new SessionRelays({ hub: HUB, upstream: '/run/host-services/ssh-auth.sock', owner: 'own', records: store, image: () => Promise.resolve('sandboxd-relay:abc'), run: docker.run, docker: '/usr/bin/docker', env: {}, logger });
    return { subject, docker, file };
  }

  it('each session gets one, recorded before it is made; a spare of its user is kept started for the next, and removed at the end', async () => {
    const { subject, docker, file } = relays();
    const first = await subject.open(1000, 1000);
    const second = await subject.open(1000, 1000);
    expect(new Set([first.name, second.name]).size).toBe(2);
    expect(subject.inUse).toBe(2);
    const runs = (): string[] => docker.commands().filter((command) => command.startsWith('run '));
    // Its own and a spare, then the spare taken and another spare started.
    await vi.waitFor(() => {
      expect(runs()).toHaveLength(3);
    });
    // The second session took the spare started with the first.
    expect(runs().slice(0, 2).join('\n')).toContain(`--name ${second.name} `);
    expect(runs()[0]).toContain(`--mount type=volume,source=${HUB},target=/hub,readonly`);
    expect(runs()[0]).toMatch(/--user 1000:1000 .*serve \/hub\/agent\.sock \/srv\/agent\.sock 8 20 600$/);
    expect(runs().join(' ')).not.toContain('--group-add');
    expect((helpersIn(file) as { name: string }[]).map((record) => record.name)).toEqual(expect.arrayContaining([first.name, second.name]));
    await subject.close(first, false);
    expect(docker.commands().slice(-2)).toEqual([`rm --force ${first.name}`, `volume rm ${first.name}`]);
    const before = docker.commands().length;
    await subject.close(second, true);
    expect(docker.commands()).toHaveLength(before);
    expect(subject.kept).toBe(1);
    await subject.removeSpares();
    expect(helpersIn(file)).toEqual([{ name: second.name, docker: '/usr/bin/docker', env: {} }]);
  });

  it('a recorded relay that still runs is taken as it is; one that does not is started again with its name and volume', async () => {
    const running = relays((args) => (args[0] === 'inspect' ? ok('true') : ok('sandboxd-relay ready')));
    await running.subject.open(0, 0, NAME);
    expect(running.docker.commands()).toEqual([`inspect --format {{.State.Running}} ${NAME}`]);
    const gone = relays((args) => (args[0] === 'inspect' ? { exitCode: 1, stdout: '', stderr: 'no such container' } : ok('sandboxd-relay ready')));
    await gone.subject.open(0, 0, NAME);
    expect(gone.docker.commands().filter((command) => command.startsWith('run '))).toEqual([expect.stringContaining(`--name ${NAME} `) as string]);
  });

  it('a start the engine\'s runtime failed (dockerd and runc racing under load) is made again, three times in all; a third failure fails the session', async () => {
    const hiccup: SubprocessResult = { exitCode: 125, stdout: '', stderr: 'docker: Error response from daemon: OCI runtime start failed: cannot start an already running container: unknown.' };
    const nameOf = (args: readonly string[]): string => args[args.indexOf('--name') + 1] ?? '';
    // Each relay's first start fails, its second starts.
    const failed = new Set<string>();
    const once = relays((args) => {
      if (args[0] === 'run' && !failed.has(nameOf(args))) {
        failed.add(nameOf(args));
        return hiccup;
      }
      return args[0] === 'logs' ? ok('sandboxd-relay ready') : ok();
    });
    const relay = await once.subject.open(1000, 1000);
    const own = once.docker.commands().filter((command) => command.includes(relay.name));
    const runs = own.flatMap((command, index) => (command.startsWith('run ') ? [index] : []));
    expect(runs).toHaveLength(2);
    // The container the failed start left created goes before the second start.
    expect(own.slice(runs[0], runs[1])).toContain(`rm --force ${relay.name}`);
    const always = relays((args) => (args[0] === 'run' ? hiccup : ok()));
    await expect(always.subject.open(1000, 1000)).rejects.toMatchObject({ code: 'RELAY_CONTAINER_FAILED', message: expect.stringContaining('OCI runtime start failed') as string });
    const starts = always.docker.calls.filter((call) => call.args[0] === 'run').map((call) => nameOf(call.args));
    expect(new Set(starts).size).toBeGreaterThan(0);
    for (const name of new Set(starts)) expect(starts.filter((started) => started === name)).toHaveLength(3);
  });

  it('reads what each relay refused and bound again from its status line when asked', async () => {
    const { subject } = relays((args) => (args[0] === 'logs' && args.includes('--tail') ? { exitCode: 0, stdout: 'sandboxd-relay ready\nsandboxd-relay status open=8 refused=292 rebound=1\n', stderr: 'sandboxd-relay: /srv/agent.sock was not the socket it bound; bound it again\n' } : ok('sandboxd-relay ready')));
    const relay = await subject.open(1000, 1000);
    await subject.refresh();
    expect(relay.refused).toBe(292);
    expect(subject.rebound).toEqual({ count: 1, said: 'sandboxd-relay: /srv/agent.sock was not the socket it bound; bound it again' });
    expect(parseRelayStatus('nothing yet', '')).toBeNull();
  });
});

describe('DesktopRelay (the hub): a container that stops by itself, or is halted while it starts', () => {
  function hub(answers?: (args: readonly string[]) => SubprocessResult, image = () => Promise.resolve('sandboxd-relay:abc'), options: { keeping?: boolean; kept?: number } = {}) {
    const { file, store } = records();
    const docker = fakeDocker(answers ?? ((args) => (args[0] === 'logs' ? ok('sandboxd-relay ready') : args[0] === 'inspect' ? { exitCode: 1, stdout: '', stderr: 'no such object' } : ok())));
    const watches: { stop: ReturnType<typeof vi.fn>; exit: (code: number | null) => void }[] = [];
    // Stands in for `docker wait`: the test says when the container stops, and with which code.
    const watch = (): ContainerWatch => {
      let exit: (code: number | null) => void = () => undefined;
      const exited = new Promise<number | null>((resolve) => (exit = resolve));
      const entry = { stop: vi.fn(), exit: (code: number | null) => { exit(code); } };
      watches.push(entry);
      return { exited, stop: entry.stop };
    };
    const removals: string[] = [];
    const bridge = new DesktopRelay({
      id: 'crelay_t', name: HUB, upstream: '/run/host-services/ssh-auth.sock', owner: 'own', records: store,
      image, run: docker.run, docker: '/usr/bin/docker', env: { DOCKER_HOST: 'unix:///d.sock' }, logger, watch,
      sessions: () => ({ endpoints: 0, refused: 0, rebound: 0, said: null, kept: options.kept ?? 0 }),
      keeping: () => options.keeping ?? false,
      beforeRemoval: () => {
        removals.push('spares');
        return Promise.resolve();
      },
    });
    return { bridge, docker, watches, file, removals };
  }

  it('runs as root with no capabilities, bounded toward the agent, serving a 0666 socket in its own volume; recorded before anything is made', async () => {
    const { bridge, docker, file } = hub();
    bridge.start();
    await bridge.whenReady();
    expect(helpersIn(file)).toEqual([{ name: HUB, docker: '/usr/bin/docker', env: { DOCKER_HOST: 'unix:///d.sock' } }]);
    const run = docker.commands().find((command) => command.startsWith('run ')) ?? '';
    expect(run).toBe(
      `run --detach --name ${HUB} --label sandboxd.owner=own --label sandboxd.helper=relay --network none --cap-drop ALL --read-only --security-opt no-new-privileges ` +
        `--pids-limit 80 --memory 32m --pull never --user 0:0 --mount type=bind,source=/run/host-services/ssh-auth.sock,target=/upstream.sock --mount type=volume,source=${HUB},target=/hub ` +
        '--entrypoint /sandboxd-relay sandboxd-relay:abc serve /upstream.sock /hub/agent.sock 64 0 666',
    );
    expect(docker.commands()).toContain(`volume create --driver local --opt type=tmpfs --opt device=tmpfs --opt o=uid=0,gid=0,mode=0711,size=64k,nr_inodes=16 --label sandboxd.owner=own --label sandboxd.helper=relay ${HUB}`);
  });

  it('takes over a hub a previous daemon left running with this image, as it is', async () => {
    const { bridge, docker } = hub((args) => (args[0] === 'inspect' ? ok('true sandboxd-relay:abc') : ok()));
    bridge.start();
    await bridge.whenReady();
    expect(docker.commands().filter((command) => command.startsWith('run ') || command.startsWith('rm '))).toEqual([]);
  });

  it('a stop leaves it failed until the next session asks; halt stops the watch, removes the spares first, and forgets the record once the volume is gone', async () => {
    const { bridge, watches, file, removals } = hub();
    bridge.start();
    await bridge.whenReady();
    watches[0]?.exit(137);
    await vi.waitFor(() => {
      expect(bridge.describe(1).state).toBe('failed');
    });
    expect(watches).toHaveLength(1);
    await bridge.whenReady();
    expect(bridge.describe(1)).toMatchObject({ state: 'ready', restarts: 1 });
    await bridge.halt();
    expect(removals).toEqual(['spares']);
    expect(watches[1]?.stop).toHaveBeenCalled();
    expect(helpersIn(file)).toEqual([]);
  });

  it('as the daemon stops with sessions\' relays kept, it keeps running for them, with its record', async () => {
    const { bridge, docker, file } = hub(undefined, undefined, { keeping: true, kept: 1 });
    bridge.start();
    await bridge.whenReady();
    await bridge.halt();
    expect(docker.commands().filter((command) => command.startsWith('rm ') || command.startsWith('volume rm'))).toEqual([`rm --force ${HUB}`]);
    expect(helpersIn(file)).toHaveLength(1);
  });

  it('a halt while it starts wins: the hub stays stopped, and nothing watches the container it went on to start', async () => {
    let halted: () => void = () => undefined;
    const afterHalt = new Promise<void>((resolve) => (halted = resolve));
    const { bridge, watches } = hub(undefined, () => afterHalt.then(() => 'sandboxd-relay:abc'));
    bridge.start();
    const ready = bridge.whenReady();
    await bridge.halt();
    halted();
    await ready;
    expect(bridge.describe(0).state).toBe('stopped');
    expect(watches).toEqual([]);
  });
});

describe('the wait for a relay\'s ready line', () => {
  it('is measured on the monotonic clock: a wall clock stepped an hour forward does not end it', async () => {
    let looks = 0;
    const answers = (args: readonly string[]): SubprocessResult => {
      if (args[0] === 'inspect') return { exitCode: 1, stdout: '', stderr: '' };
      if (args[0] !== 'logs') return ok();
      looks += 1;
      return ok(looks < 3 ? '' : 'sandboxd-relay ready');
    };
    const realNow = Date.now.bind(Date);
    // Each poll's pause is where the wall clock is stepped (NTP, a laptop waking up).
    const stepped = (): Promise<void> => {
      const now = realNow() + looks * 3_600_000;
      vi.spyOn(Date, 'now').mockReturnValue(now);
      return Promise.resolve();
    };
    const { store } = records();
    const docker = fakeDocker(answers);
    const bridge = new DesktopRelay({
      id: 'crelay_t', name: HUB, upstream: '/run/host-services/ssh-auth.sock', owner: 'own', records: store,
      image: () => Promise.resolve('sandboxd-relay:abc'), run: docker.run, docker: '/usr/bin/docker', env: {}, logger, sleep: stepped,
      watch: () => ({ exited: new Promise(() => undefined), stop: () => undefined }),
      sessions: () => ({ endpoints: 0, refused: 0, rebound: 0, said: null, kept: 0 }),
      keeping: () => false,
      beforeRemoval: () => Promise.resolve(),
    });
    cleanup.add(() => bridge.halt());
    bridge.start();
    await bridge.whenReady();
    expect(looks).toBe(3);
    expect(bridge.describe(1).state).toBe('ready');
  });
});

describe('why a relay cannot reach the engine\'s agent socket', () => {
  const UPSTREAM = '/run/host-services/ssh-auth.sock';
  it('names the owner problem, or the missing agent, from the relay\'s connect line', () => {
    expect(upstreamReason('sandboxd-relay: connect /upstream.sock: Permission denied', UPSTREAM)).toBe(
      `permission denied: the engine's agent socket ${UPSTREAM} is not writable by the hub's user (root without capabilities, or the socket's owner as the probe found it)`,
    );
    expect(upstreamReason('sandboxd-relay: connect /upstream.sock: Connection refused', UPSTREAM)).toBe(`no agent listens at ${UPSTREAM} in the engine's VM`);
    expect(upstreamReason('sandboxd-relay: connect /upstream.sock: No such file or directory', UPSTREAM)).toBe(`no agent listens at ${UPSTREAM} in the engine's VM`);
    expect(upstreamReason('sandboxd-relay: listen /relay/agent.sock: Address in use', UPSTREAM)).toBeNull();
  });
});
