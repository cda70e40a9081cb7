import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { DesktopRelay, upstreamReason, type ContainerWatch } from '../../daemon/bridges/desktop-relay.js';
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
    await store.forget(['sandboxd-relay-fedcba9876543210']);
    expect(await new HelperRecords(file, logger).load()).toEqual([{ name: NAME, docker: '/usr/bin/docker', env: { PATH: '/bin', DOCKER_HOST: 'unix:///d.sock' } }]);
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
    const docker = fakeDocker((args) => (args[0] === 'ps' ? ok('c1\nc2') : args[0] === 'volume' && args[1] === 'ls' ? ok(NAME) : ok()));
    await removeLeftoverHelpers({ run: docker.run, owner: 'own', records: store, logger });
    const filters = '--filter label=sandboxd.owner=own --filter label=sandboxd.helper';
    const perEngine = [`ps --all --quiet --no-trunc ${filters}`, 'rm --force c1 c2', `volume ls --quiet ${filters}`, `volume rm ${NAME}`];
    expect(docker.commands()).toEqual([...perEngine, ...perEngine]);
    expect(docker.calls.map((call) => call.env.DOCKER_HOST)).toEqual([...perEngine.map(() => 'unix:///a.sock'), ...perEngine.map(() => 'unix:///b.sock')]);
    expect(helpersIn(file)).toEqual([]);
  });

  it('keeps the record while a volume is still mounted (the engine refuses) or the engine does not answer', async () => {
    const { file, store } = records();
    await store.add(helperRecord(NAME, '/usr/bin/docker', {}));
    const busy = fakeDocker((args) => (args[1] === 'ls' ? ok(NAME) : args[1] === 'rm' ? { exitCode: 1, stdout: '', stderr: 'volume is in use' } : ok()));
    await removeLeftoverHelpers({ run: busy.run, owner: 'own', records: store, logger });
    const down = fakeDocker(() => ({ exitCode: 1, stdout: '', stderr: 'Cannot connect to the Docker daemon' }));
    await removeLeftoverHelpers({ run: down.run, owner: 'own', records: store, logger });
    expect(down.commands()).toHaveLength(1);
    expect(await new HelperRecords(file, logger).load()).toHaveLength(1);
  });
});

describe('DesktopRelay: a relay container that stops by itself, or is halted while it starts', () => {
  function relay(answers?: (args: readonly string[]) => SubprocessResult, image = () => Promise.resolve('sandboxd-relay:abc'), sleep?: (ms: number) => Promise<void>) {
    const { file, store } = records();
    const docker = fakeDocker(answers ?? ((args) => (args[0] === 'logs' ? { exitCode: 0, stdout: 'sandboxd-relay ready', stderr: 'sandboxd-relay: /srv/agent.sock is not the socket it bound' } : ok())));
    const watches: { stop: ReturnType<typeof vi.fn>; exit: (code: number | null) => void }[] = [];
    // Stands in for `docker wait`: the test says when the container stops, and with which code.
    const watch = (): ContainerWatch => {
      let exit: (code: number | null) => void = () => undefined;
      const exited = new Promise<number | null>((resolve) => (exit = resolve));
      const entry = { stop: vi.fn(), exit: (code: number | null) => { exit(code); } };
      watches.push(entry);
      return { exited, stop: entry.stop };
    };
    const bridge = new DesktopRelay({
      id: 'crelay_t', name: NAME, upstream: '/run/host-services/ssh-auth.sock', uid: 1000, gid: 1000, owner: 'own', records: store,
      image, run: docker.run, docker: '/usr/bin/docker', env: { DOCKER_HOST: 'unix:///d.sock' }, logger, watch, sleep,
    });
    return { bridge, docker, watches, file };
  }

  it('is recorded before anything is created; exit 3 (its socket replaced) re-creates it at once, saying so', async () => {
    const { bridge, docker, watches, file } = relay();
    bridge.start();
    await bridge.whenReady();
    expect(helpersIn(file)).toEqual([{ name: NAME, docker: '/usr/bin/docker', env: { DOCKER_HOST: 'unix:///d.sock' } }]);
    expect(docker.commands().slice(0, 3)).toEqual([`rm --force ${NAME}`, `volume rm ${NAME}`, expect.stringMatching(/^volume create /) as string]);
    watches[0]?.exit(3);
    await vi.waitFor(() => {
      expect(watches).toHaveLength(2);
    });
    expect(bridge.describe(1)).toMatchObject({ state: 'ready', restarts: 1, lastError: `relay container ${NAME} stopped (exit 3): sandboxd-relay: /srv/agent.sock is not the socket it bound` });
  });

  it('any other stop leaves it failed until the next session asks; halt stops the watch and forgets the record once the volume is gone', async () => {
    const { bridge, watches, file } = relay();
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
    expect(watches[1]?.stop).toHaveBeenCalled();
    expect(helpersIn(file)).toEqual([]);
  });

  it('a halt while it starts wins: the relay stays stopped, and nothing watches the container it went on to start', async () => {
    let halted: () => void = () => undefined;
    const afterHalt = new Promise<void>((resolve) => (halted = resolve));
    const { bridge, watches } = relay(undefined, () => afterHalt.then(() => 'sandboxd-relay:abc'));
    bridge.start();
    const ready = bridge.whenReady();
    await bridge.halt();
    halted();
    await ready;
    expect(bridge.describe(0).state).toBe('stopped');
    expect(watches).toEqual([]);
  });
});

describe('DesktopRelay: a launch that a restart or halt overtook removes the container it started', () => {
  /**
   * The docker CLI, where the first `docker run` returns only when `release` is called; `docker run`
   * prints the new container's id, here the first's `id-of-overtaken` and any later one's `id-of-newer`.
   */
  function gatedRun() {
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let runs = 0;
    const docker = fakeDocker((args) => (args[0] === 'logs' ? ok('sandboxd-relay ready') : ok()));
    const run: RunSubprocess = async (file, args, options) => {
      const answer = await docker.run(file, args, options);
      if (args[0] !== 'run') return answer;
      runs += 1;
      if (runs > 1) return ok('id-of-newer\n');
      await gate;
      return ok('id-of-overtaken\n');
    };
    return { docker, run, release: () => { release(); } };
  }
  function relay() {
    const { file, store } = records();
    const { docker, run, release } = gatedRun();
    const watches: string[] = [];
    const bridge = new DesktopRelay({
      id: 'crelay_t', name: NAME, upstream: '/run/host-services/ssh-auth.sock', uid: 1000, gid: 1000, owner: 'own', records: store,
      image: () => Promise.resolve('sandboxd-relay:abc'), run, docker: '/usr/bin/docker', env: {}, logger,
      watch: (name) => {
        watches.push(name);
        return { exited: new Promise(() => undefined), stop: () => undefined };
      },
    });
    /** Resolves once the first launch is inside its `docker run`. */
    const running = vi.waitFor(() => {
      expect(docker.commands().at(-1)).toMatch(/^run /);
    });
    return { bridge, docker, watches, file, release, running };
  }

  it('a halt: the container goes by its id, and the volume and record the halt could not remove yet go too', async () => {
    const { bridge, docker, watches, file, release, running } = relay();
    bridge.start();
    const ready = bridge.whenReady();
    await running;
    await bridge.halt();
    const halted = docker.commands().length;
    release();
    await ready;
    expect(docker.commands().slice(halted)).toEqual(['rm --force id-of-overtaken', `volume rm ${NAME}`]);
    expect(bridge.describe(0).state).toBe('stopped');
    expect(watches).toEqual([]);
    expect(helpersIn(file)).toEqual([]);
  });

  it('a restart: the overtaken container goes by its id, the newer one keeps its name, volume and record', async () => {
    const { bridge, docker, watches, file, release, running } = relay();
    bridge.start();
    const first = bridge.whenReady();
    await running;
    await bridge.restart();
    release();
    await first;
    const removed = docker.commands().filter((command) => command.startsWith('rm ') || command.startsWith('volume rm'));
    expect(removed.at(-1)).toBe('rm --force id-of-overtaken');
    expect(docker.commands()).not.toContain('rm --force id-of-newer');
    expect(bridge.describe(1)).toMatchObject({ state: 'ready', restarts: 1 });
    expect(watches).toEqual([NAME]);
    expect(helpersIn(file)).toEqual([{ name: NAME, docker: '/usr/bin/docker', env: {} }]);
  });
});

describe('DesktopRelay: the wait for the ready line', () => {
  it('is measured on the monotonic clock: a wall clock stepped an hour forward does not end it', async () => {
    let looks = 0;
    const answers = (args: readonly string[]): SubprocessResult => {
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
    const { file, store } = records();
    const docker = fakeDocker(answers);
    const bridge = new DesktopRelay({
      id: 'crelay_t', name: NAME, upstream: '/run/host-services/ssh-auth.sock', uid: 1000, gid: 1000, owner: 'own', records: store,
      image: () => Promise.resolve('sandboxd-relay:abc'), run: docker.run, docker: '/usr/bin/docker', env: {}, logger, sleep: stepped,
      watch: () => ({ exited: new Promise(() => undefined), stop: () => undefined }),
    });
    cleanup.add(() => bridge.halt());
    bridge.start();
    await bridge.whenReady();
    expect(looks).toBe(3);
    expect(bridge.describe(1).state).toBe('ready');
    expect(helpersIn(file)).toHaveLength(1);
  });
});

describe('why a relay cannot reach the engine\'s agent socket', () => {
  const UPSTREAM = '/run/host-services/ssh-auth.sock';
  it('names the owner problem, or the missing agent, from the relay\'s connect line', () => {
    expect(upstreamReason('sandboxd-relay: connect /upstream.sock: Permission denied', 'uid 1000 with group 0', UPSTREAM)).toBe(
      `permission denied: the engine's agent socket ${UPSTREAM} is not writable by uid 1000 with group 0 (older Docker Desktop made it root's, mode 0755; Colima's belongs to the VM's user)`,
    );
    expect(upstreamReason('sandboxd-relay: connect /upstream.sock: Connection refused', 'uid 501', UPSTREAM)).toBe(`no agent listens at ${UPSTREAM} in the engine's VM`);
    expect(upstreamReason('sandboxd-relay: connect /upstream.sock: No such file or directory', 'uid 501', UPSTREAM)).toBe(`no agent listens at ${UPSTREAM} in the engine's VM`);
    expect(upstreamReason('sandboxd-relay: listen /relay/agent.sock: Address in use', 'uid 501', UPSTREAM)).toBeNull();
  });
});
