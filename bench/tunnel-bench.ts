import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { execa } from 'execa';
import { acquireSession, ensureDaemon, getStatus, listSessions, listTunnels, removeTunnel, requestShutdown, clientPaths } from '../client/index.js';
import { Cleanup, makeSandbox, startAgent, waitFor } from '../test/helpers.js';
import { removeTunnelRoots, startSshd, type Sshd } from '../test/lab/sshd.js';
import { tunnelSshPids } from './soak/invariants.js';
import { daemonOfUnreapingParent, killToZombie } from '../test/lab/unreaping-parent.js';
import { PROTOCOL_HEADER, PROTOCOL_VERSION } from '../shared/protocol.js';
import { CLIENT_ENV_NAMES } from '../shared/contracts/session-routes.js';
import { DISCOVERY_TTL_MS } from '../daemon/podman/discovery-cache.js';
import { GIT_FACTS_TTL_MS } from '../daemon/plan/git/git-host.js';
import { ADAPTER, llxprtLaunchCost, llxprtLaunchCosts, type LaunchCost, type LaunchShape } from './llxprt-import.js';
import { median, percentile, timed } from './stats.js';
import { coldPhaseRows, coldStartOf, coldSummaryRow, type ColdStart } from './cold-phases.js';
import { gitRows } from './git-rows.js';
import { runtimes, transportRows } from './transport-rows.js';

/**
 * `npm run bench`: the tunnel figures and the speed figures (client, daemon, CLI), measured in one
 * run on a real loopback sshd (standing in for the Podman machine), a real ssh-agent and the real
 * podman CLI. It prints figures and ratios; nothing here fails on a slow machine.
 */
/** `npm run bench -- --short` (CI): every row once, on few runs, to prove the bench still works. */
const SHORT = process.argv.includes('--short');
const COLD_RUNS = SHORT ? 2 : 7;
const WARM_RUNS = SHORT ? 50 : 300;
const CONCURRENT = 20;
const POLL_MS = 200;
const RESTART_RUNS = SHORT ? 1 : 5;
const CLI_RUNS = SHORT ? 3 : 10;
/** Turns of row 9: enough that the middle half of the differences is a few milliseconds wide. */
const RUN_OVERHEAD_RUNS = SHORT ? 3 : 40;
/** The scale of a busy machine: sessions held (each heartbeating) while the warm acquire is measured again. */
const HELD = SHORT ? 100 : 1000;
const IDLE_WINDOW_MS = SHORT ? 2_000 : 10_000;
/** Acquires each after the caches' TTL has passed (11 s apart), the bridge still up. */
const IDLE_RUNS = SHORT ? 1 : 3;
/** `npm run bench -- --llxprt`: only the rows of what llxprt's launcher pays for the adapter. */
const ONLY_LLXPRT = process.argv.includes('--llxprt');
const LLXPRT_RUNS = SHORT ? 3 : 15;
/**
 * `SANDBOXD_BENCH_BASE_ADAPTER=<another build's dist/client/llxprt/index.js>`: rows 10 also run
 * that build's adapter, in the same turns as this one's (a change's before and after, one window).
 */
const BASE_ADAPTER = process.env.SANDBOXD_BENCH_BASE_ADAPTER === '' ? undefined : process.env.SANDBOXD_BENCH_BASE_ADAPTER;
/** `npm run bench -- --cold`: only the rows of a start: auto-start (phase by phase), kill -9 and `sandboxd run`. */
const ONLY_COLD = process.argv.includes('--cold');
/** `npm run bench -- --transport`: only the rows of the client's transport (and the socket floor). */
const ONLY_TRANSPORT = process.argv.includes('--transport');
const TRANSPORT_COLD_RUNS = SHORT ? 2 : 20;
const TRANSPORT_GETS = SHORT ? 50 : 1000;
/** `npm run bench -- --git`: only the rows of the sandbox's own git dir. */
const ONLY_GIT = process.argv.includes('--git');
const GIT_FIRST_RUNS = SHORT ? 1 : 3;
const GIT_COMMITS = SHORT ? 5 : 50;
/** Bun runs llxprt; the bench measures the adapter under it as under Node. */
const BUN = fileURLToPath(new URL('../../node_modules/.bin/bun', import.meta.url));

/** utime + stime of a process, from /proc (clock ticks are 10 ms on Linux). */
function processCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${String(pid)}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

function processRssMb(pid: number): number {
  return (Number(readFileSync(`/proc/${String(pid)}/statm`, 'utf8').split(' ')[1]) * 4096) / 1024 / 1024;
}
/** The bundled CLI (`npm run build`), the file `sandboxd` on PATH runs. */
const CLI = fileURLToPath(new URL('../../dist/bin/sandboxd.js', import.meta.url));
/** The compiled client library next to this compiled bench, loaded by the unreaping parent. */
const CLIENT_MODULE = fileURLToPath(new URL('../client/index.js', import.meta.url));
/** The floor under `sandboxd run`: a bare Node client doing only its requests and the spawn. */
const RUN_FLOOR = fileURLToPath(new URL('./run-floor.js', import.meta.url));

function sshBase(sshd: Sshd): string[] {
  return ['-F', '/dev/null', '-i', sshd.clientKey, '-p', String(sshd.port), '-o', 'BatchMode=yes', '-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null', '-o', 'LogLevel=ERROR'];
}

/**
 * The floor under every daemon request: `node:http` over a Unix socket on a kept-alive connection,
 * to a server process that answers at once. The daemon's empty round trip is compared with it.
 */
async function httpFloor(dir: string, runs: number): Promise<number[]> {
  const socketPath = path.join(dir, 'floor.sock');
  const server = spawn(process.execPath, ['-e', `require('node:http').createServer((q, s) => s.end('{}')).listen(${JSON.stringify(socketPath)}, () => console.log('ready'))`], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => { reject(new Error('the floor server did not start within 10 s')); }, 10_000);
      server.stdout.once('data', () => { clearTimeout(timer); resolve(); });
    });
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const get = () =>
      new Promise<void>((resolve, reject) => {
        http.get({ socketPath, path: '/', agent }, (res) => res.resume().on('end', resolve)).on('error', reject);
      });
    await get();
    const times: number[] = [];
    for (let run = 0; run < runs; run += 1) times.push(await timed(get));
    agent.destroy();
    return times;
  } finally {
    server.kill();
  }
}

/** (5) the floor: one full SSH login that does nothing. */
async function bareHandshake(sshd: Sshd): Promise<number> {
  return timed(() => execa('ssh', [...sshBase(sshd), 'root@127.0.0.1', 'true'], { timeout: 10_000 }));
}

/**
 * (4) what a CLI does on its own today: clear the VM socket over ssh, spawn `ssh -R`, poll
 * `test -S` with a fresh login every 200 ms until it exists, then tear down at exit.
 */
async function baselineSession(sshd: Sshd, agentSocket: string, vmSocket: string): Promise<number> {
  const base = [...sshBase(sshd), 'root@127.0.0.1'];
  return timed(async () => {
    await execa('ssh', [...base, `rm -f ${vmSocket}`], { timeout: 10_000 });
    const tunnel = spawn('ssh', [...sshBase(sshd), '-o', 'ExitOnForwardFailure=yes', '-N', '-R', `${vmSocket}:${agentSocket}`, 'root@127.0.0.1'], { stdio: 'ignore' });
    try {
      const deadline = Date.now() + 15_000;
      for (;;) {
        const probe = await execa('ssh', [...base, `test -S ${vmSocket}`], { reject: false, timeout: 10_000 });
        if (probe.exitCode === 0) break;
        if (Date.now() > deadline) throw new Error('baseline tunnel never became ready');
        await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      }
    } finally {
      tunnel.kill('SIGTERM');
    }
  });
}

async function removeAllTunnels(env: NodeJS.ProcessEnv): Promise<void> {
  for (const tunnel of await listTunnels(env)) await removeTunnel(tunnel.id, env);
}

async function stopDaemon(env: NodeJS.ProcessEnv): Promise<void> {
  await requestShutdown(env);
  const { pidPath } = clientPaths(env);
  await waitFor(() => !existsSync(pidPath), 'the daemon to stop');
}

/**
 * (6) a daemon killed as users meet it: a long-lived client auto-started the daemon and does not
 * reap it; kill -9 leaves a zombie holding the lock's pid record; time the next acquire.
 */
async function killedDaemonToNextAcquire(env: NodeJS.ProcessEnv): Promise<ColdStart> {
  const parent = new Cleanup();
  try {
    await killToZombie(await daemonOfUnreapingParent(CLIENT_MODULE, env, parent));
    let session: Awaited<ReturnType<typeof acquireSession>> | null = null;
    const ms = await timed(async () => (session = await acquireSession({ engine: 'podman', env, heartbeat: false, sshAgent: 'off' })));
    await (session as Awaited<ReturnType<typeof acquireSession>> | null)?.release();
    await stopDaemon(env);
    return coldStartOf(clientPaths(env).logPath, ms);
  } finally {
    await parent.run();
  }
}

/**
 * (6) the floor for the figure above: an acquire that auto-starts a daemon where none ran, with
 * the daemon's own timings of its start and of that first plan.
 */
async function freshStartToFirstAcquire(env: NodeJS.ProcessEnv): Promise<ColdStart> {
  let session: Awaited<ReturnType<typeof acquireSession>> | null = null;
  const ms = await timed(async () => (session = await acquireSession({ engine: 'podman', env, heartbeat: false, sshAgent: 'off' })));
  await (session as Awaited<ReturnType<typeof acquireSession>> | null)?.release();
  await stopDaemon(env);
  return coldStartOf(clientPaths(env).logPath, ms);
}

/**
 * (10) what llxprt's launch pays for `sandboxd/llxprt`, from the launch path's first line (the
 * adapter's import) to llxprt's argument list merged, the agent and the credential proxy carried
 * in one session, a warm local daemon answering (a mount bridge, so the figures are sandboxd's
 * own): on every runtime, in a process shaped like llxprt's at that point (the builtins its
 * launcher imports already loaded), and once bare; the daemon's share apart. On Bun also bundled
 * into the program with `bun build`, as llxprt ships it, and on node:net instead of Bun's socket,
 * the comparison behind the client's choice.
 */
/**
 * A launch's time by part, each part's median: the import, the client's work before the acquire
 * reaches the daemon, the daemon's answer, and the client's work on it until the arguments are
 * merged (the parts' medians need not add up to the total's).
 */
function launchShares(cost: LaunchCost): string {
  const part = (ms: number[]) => `${median(ms).toFixed(1)} ms`;
  return `import ${part(cost.importMs)} + before the request ${part(cost.beforeRequestMs)} + the daemon ${part(cost.daemonMs)} + after the answer ${part(cost.afterMs)}`;
}

/** Between two llxprt launches in one repository: a person's pace (the daemon may work meanwhile). */
const LAUNCH_PAUSE_MS = 3000;

/**
 * Launches one at a time in a git repository of their own (with linked worktrees), as llxprt's are: each waits until the
 * last one's session ended (the daemon watches the launching process) and a person's pause passed,
 * so no session holds the repository when it acquires.
 */
async function oneAtATime(env: NodeJS.ProcessEnv, dir: string, name: string): Promise<{ cwd: string; between: () => Promise<void> }> {
  const cwd = path.join(dir, `llxprt-repo-${name.replaceAll(/\W+/g, '-')}`);
  mkdirSync(cwd, { recursive: true });
  const git = (...args: string[]) => execa('git', ['-c', 'user.name=Bench', '-c', 'user.email=bench@example.com', '-c', 'commit.gpgsign=false', ...args], { cwd, env: { ...env, GIT_CONFIG_NOSYSTEM: '1' } });
  await git('init', '-q', '-b', 'main');
  writeFileSync(path.join(cwd, 'file.txt'), 'bench\n');
  await git('add', '.');
  await git('commit', '-q', '-m', 'init');
  // Six linked worktrees, as a repository worked on in parallel has: each is a git dir the copy takes.
  for (const branch of ['a', 'b', 'c', 'd', 'e', 'f']) await git('worktree', 'add', '-q', '-b', branch, `${cwd}-${branch}`);
  const between = async (): Promise<void> => {
    await waitFor(async () => (await listSessions(env)).every((session) => session.label !== 'llxprt'), 'the last launch\'s session to end', 30_000);
    await new Promise((resolve) => setTimeout(resolve, LAUNCH_PAUSE_MS));
  };
  return { cwd, between };
}

/**
 * Launches in the repository `repo.cwd` while another session holds it, as a second llxprt in the
 * same project: the sandbox git dir is shared, nothing is copied. Each waits until the last one's
 * session ended, with no pause.
 */
async function besideAHolder(env: NodeJS.ProcessEnv, repo: { cwd: string }): Promise<{ place: { cwd: string; between: () => Promise<void> }; release: () => Promise<void> }> {
  const holder = await acquireSession({ engine: 'podman', env, cwd: repo.cwd, sshAgent: 'off', label: 'holder' });
  const between = async (): Promise<void> => {
    await waitFor(async () => (await listSessions(env)).every((session) => session.label !== 'llxprt'), 'the last launch\'s session to end', 30_000);
  };
  return {
    place: { cwd: repo.cwd, between },
    release: async () => {
      await holder.release();
    },
  };
}

async function llxprtRows(env: NodeJS.ProcessEnv, dir: string): Promise<[string, string, string][]> {
  const rows: [string, string, string][] = [];
  const baseRows: [string, string, string][] = [];
  const daemonSocket = clientPaths(env).socketPath;
  for (const { name, command } of await runtimes(BUN)) {
    const at = async (shape: LaunchShape): Promise<LaunchCost> => {
      const shapeDir = path.join(dir, `llxprt-${name.replaceAll(/\W+/g, '-')}-${shape}`);
      if (BASE_ADAPTER === undefined) return llxprtLaunchCost(command, shape, env, daemonSocket, shapeDir, LLXPRT_RUNS);
      const [cost, base] = (await llxprtLaunchCosts(command, shape, env, daemonSocket, shapeDir, LLXPRT_RUNS, {}, [ADAPTER, BASE_ADAPTER])) as [LaunchCost, LaunchCost];
      baseRows.push([
        `(10) sandboxd/llxprt on ${name}, ${shape}: this build / the base build`,
        `${median(cost.mergedMs).toFixed(1)} / ${median(base.mergedMs).toFixed(1)} ms`,
        `in the same turns; CPU ${median(cost.mergedCpuMs).toFixed(1)} / ${median(base.mergedCpuMs).toFixed(1)} ms; base: ${launchShares(base)}`,
      ]);
      return cost;
    };
    const launch = await at('llxprt');
    const bare = await at('bare');
    const merged = median(launch.mergedMs);
    const daemon = median(launch.daemonMs);
    rows.push(
      [`(10) sandboxd/llxprt on ${name}: import`, `${median(launch.importMs).toFixed(1)} ms`, `CPU ${median(launch.importCpuMs).toFixed(1)} ms`],
      [`(10) sandboxd/llxprt on ${name}: acquire at the daemon`, `${median(launch.firstRequestMs).toFixed(1)} ms`, 'from the launch path\'s first line: what the launch pays before sandboxd is asked'],
      [`(10) sandboxd/llxprt on ${name}: the daemon's answer`, `${daemon.toFixed(1)} ms`, 'its warm acquire, the agent and the credential socket: the daemon\'s share'],
      [
        `(10) sandboxd/llxprt on ${name}: arguments merged`,
        `${merged.toFixed(1)} ms`,
        `fastest ${Math.min(...launch.mergedMs).toFixed(1)} ms, CPU ${median(launch.mergedCpuMs).toFixed(1)} ms; the client's share ${(merged - daemon).toFixed(1)} ms (target: the whole <= 15 ms)`,
      ],
      [`(10) sandboxd/llxprt on ${name}: where it goes`, `${merged.toFixed(1)} ms`, launchShares(launch)],
      [`(10) sandboxd/llxprt on ${name}, bare process: arguments merged`, `${median(bare.mergedMs).toFixed(1)} ms`, `nothing loaded before; import ${median(bare.importMs).toFixed(1)} ms, the daemon's share ${median(bare.daemonMs).toFixed(1)} ms`],
    );
    const repo = await oneAtATime(env, dir, name);
    const inRepo = await llxprtLaunchCost(command, 'llxprt', env, daemonSocket, path.join(dir, `llxprt-${name.replaceAll(/\W+/g, '-')}-repo`), LLXPRT_RUNS, repo);
    const holder = await besideAHolder(env, repo);
    let held: LaunchCost;
    try {
      held = await llxprtLaunchCost(command, 'llxprt', env, daemonSocket, path.join(dir, `llxprt-${name.replaceAll(/\W+/g, '-')}-held`), LLXPRT_RUNS, holder.place);
    } finally {
      await holder.release();
    }
    rows.push(
      [
        `(10) sandboxd/llxprt on ${name}, in a git repository no session holds: arguments merged`,
        `${median(inRepo.mergedMs).toFixed(1)} ms`,
        `the daemon's share ${median(inRepo.daemonMs).toFixed(1)} ms (its fresh sandbox git dir); one launch at a time, ${String(LAUNCH_PAUSE_MS)} ms apart`,
      ],
      [`(10) sandboxd/llxprt on ${name}, in a git repository no session holds: where it goes`, `${median(inRepo.mergedMs).toFixed(1)} ms`, launchShares(inRepo)],
      [
        `(10) sandboxd/llxprt on ${name}, in a git repository another session holds: arguments merged`,
        `${median(held.mergedMs).toFixed(1)} ms`,
        `the daemon's share ${median(held.daemonMs).toFixed(1)} ms (the sandbox git dir shared): a second launch in the same project`,
      ],
      [`(10) sandboxd/llxprt on ${name}, in a git repository another session holds: where it goes`, `${median(held.mergedMs).toFixed(1)} ms`, launchShares(held)],
    );
    if (name.startsWith('bun')) {
      const bundled = await at('bundled');
      const nodeNet = await at('node-net');
      rows.push(
        [
          `(10) sandboxd/llxprt on ${name}, in a bun build bundle: arguments merged`,
          `${median(bundled.mergedMs).toFixed(1)} ms`,
          `as llxprt ships it; fastest ${Math.min(...bundled.mergedMs).toFixed(1)} ms, CPU ${median(bundled.mergedCpuMs).toFixed(1)} ms`,
        ],
        [`(10) sandboxd/llxprt on ${name}, in a bun build bundle: where it goes`, `${median(bundled.mergedMs).toFixed(1)} ms`, launchShares(bundled)],
        [
          `(10) sandboxd/llxprt on ${name} over node:net: arguments merged`,
          `${median(nodeNet.mergedMs).toFixed(1)} ms`,
          `instead of Bun.connect (${merged.toFixed(1)} ms); the daemon's share ${median(nodeNet.daemonMs).toFixed(1)} ms, CPU ${median(nodeNet.mergedCpuMs).toFixed(1)} ms`,
        ],
      );
    }
  }
  return [...rows, ...baseRows];
}

function socketFloorRow(floor: number[]): [string, string, string] {
  return ['    node:http over a Unix socket, kept alive: p50', `${median(floor).toFixed(2)} ms`, `p99 ${percentile(floor, 99).toFixed(2)} ms: the socket's floor`];
}

interface RunOverhead {
  bareRun: number[];
  sandboxdRun: number[];
  floorRun: number[];
  /** `sandboxd run` of the build SANDBOXD_BENCH_BASE_CLI names, in the same turns (empty without it). */
  baseRun: number[];
  /** The higher one-minute load average of the machine, before and after the runs. */
  load: number;
}

/**
 * (9) what `sandboxd run` adds to the engine command: a `podman run` that does nothing stands in
 * for the engine, so the difference is sandboxd's own start, acquire, merge and release. Beside
 * it the bare engine and the floor (bench/run-floor.ts), run by run in turns, the order of
 * `sandboxd run` and the floor swapped every turn; what is judged is each turn's difference, as
 * a drift of the machine's speed moves both sides of one turn alike. Both run in a plain project
 * directory of their own, so no repository's git work at the release adds to one side's noise;
 * one unmeasured turn first (the first `run` writes its code cache). `SANDBOXD_BENCH_BASE_CLI`
 * names another build's `dist/bin/sandboxd.js`, whose `run` then takes its turn too: a change's
 * before and after in one window of the machine.
 */
async function runOverhead(env: NodeJS.ProcessEnv, dir: string): Promise<RunOverhead> {
  const stubDir = path.join(dir, 'stub-engine');
  const project = path.join(dir, 'run-project');
  mkdirSync(stubDir, { recursive: true });
  mkdirSync(project, { recursive: true });
  // Only `run` is stubbed; discovery (`system connection list`) still reaches the real podman.
  const realPodman = (await execa('sh', ['-c', 'command -v podman'], { env })).stdout;
  writeFileSync(path.join(stubDir, 'podman'), `#!/bin/sh\nfor a; do [ "$a" = run ] && exit 0; done\nexec ${realPodman} "$@"\n`, { mode: 0o755 });
  const stubEnv = { ...env, PATH: `${stubDir}:${env.PATH ?? ''}` };
  const runArgs = ['--rm', 'image', 'true'];
  const floorArgs = [RUN_FLOOR, clientPaths(env).socketPath, PROTOCOL_HEADER, String(PROTOCOL_VERSION), env.SANDBOXD_SSH_BRIDGE ?? 'auto', CLIENT_ENV_NAMES.join(','), 'podman', 'image', ...runArgs];
  const bare = () => timed(() => execa(path.join(stubDir, 'podman'), ['run', ...runArgs], { env: stubEnv, cwd: project }));
  const sandboxd = () => timed(() => execa(process.execPath, [CLI, 'run', '--quiet', '--engine', 'podman', '--', ...runArgs], { env: stubEnv, cwd: project, timeout: 30_000 }));
  const floor = () => timed(() => execa(process.execPath, floorArgs, { env: stubEnv, cwd: project, timeout: 30_000 }));
  const baseCli = process.env.SANDBOXD_BENCH_BASE_CLI ?? '';
  // A cache directory of its own: two builds in one directory would each remove the other's code cache.
  const baseEnv = { ...stubEnv, XDG_CACHE_HOME: path.join(dir, 'base-cache') };
  const base = () => timed(() => execa(process.execPath, [baseCli, 'run', '--quiet', '--engine', 'podman', '--', ...runArgs], { env: baseEnv, cwd: project, timeout: 30_000 }));
  const runs: RunOverhead = { bareRun: [], sandboxdRun: [], floorRun: [], baseRun: [], load: loadavg()[0] ?? NaN };
  const turn: { measure: () => Promise<number>; times: number[] }[] = [
    { measure: sandboxd, times: runs.sandboxdRun },
    { measure: floor, times: runs.floorRun },
    ...(baseCli === '' ? [] : [{ measure: base, times: runs.baseRun }]),
  ];
  await bare();
  for (const { measure } of turn) await measure();
  for (let run = 0; run < RUN_OVERHEAD_RUNS; run += 1) {
    runs.bareRun.push(await bare());
    for (const { measure, times } of run % 2 === 0 ? turn : [...turn].reverse()) times.push(await measure());
  }
  runs.load = Math.max(runs.load, loadavg()[0] ?? NaN);
  return runs;
}

function runRows({ bareRun, sandboxdRun, floorRun, baseRun, load }: RunOverhead, nodeMs: number): [string, string, string][] {
  const overFloor = sandboxdRun.map((ms, run) => ms - (floorRun[run] ?? NaN));
  const signed = (ms: number): string => `${ms < 0 ? '' : '+'}${ms.toFixed(0)} ms`;
  const overBase = sandboxdRun.map((ms, run) => ms - (baseRun[run] ?? NaN));
  const baseRows: [string, string, string][] =
    baseRun.length === 0
      ? []
      : [
          [
            '    the same, the build SANDBOXD_BENCH_BASE_CLI names',
            signed(median(baseRun.map((ms, run) => ms - (floorRun[run] ?? NaN)))),
            `over the floor; this build minus it ${signed(median(overBase))}, middle half ${signed(percentile(overBase, 25))} to ${signed(percentile(overBase, 75))}`,
          ],
        ];
  return [
    ['(9) sandboxd run over a do-nothing engine', `${median(sandboxdRun).toFixed(0)} ms`, `bare engine ${median(bareRun).toFixed(0)} ms: overhead ${(median(sandboxdRun) - median(bareRun)).toFixed(0)} ms (target <= 100 ms + a warm acquire)`],
    ['    the floor: a bare Node client (acquire, spawn, release)', `${median(floorRun).toFixed(0)} ms`, `overhead ${(median(floorRun) - median(bareRun)).toFixed(0)} ms, of which node -e 0 is ${nodeMs.toFixed(0)}`],
    [
      "(9) sandboxd run over the bare client's floor",
      signed(median(overFloor)),
      `goal <= +20 ms; the median of ${String(overFloor.length)} turns' differences, middle half ${signed(percentile(overFloor, 25))} to ${signed(percentile(overFloor, 75))}; load ${load.toFixed(2)}`,
    ],
    ...baseRows,
  ];
}

/**
 * (6) starts, each from no daemon: one killed with kill -9, one that never ran (with the daemon's
 * timings), and, when `remoteEnv` is given, one through the remote podman connection.
 */
async function startRuns(localEnv: NodeJS.ProcessEnv, remoteEnv: NodeJS.ProcessEnv | null): Promise<{ restart: ColdStart[]; freshStarts: ColdStart[]; remoteFresh: number[] }> {
  const restart: ColdStart[] = [];
  const freshStarts: ColdStart[] = [];
  // The remote connection's first plan also logs in to the VM once, to learn what it shares.
  const remoteFresh: number[] = [];
  for (let run = 0; run < RESTART_RUNS; run += 1) {
    restart.push(await killedDaemonToNextAcquire(localEnv));
    freshStarts.push(await freshStartToFirstAcquire(localEnv));
    if (remoteEnv !== null) remoteFresh.push((await freshStartToFirstAcquire(remoteEnv)).totalMs);
  }
  return { restart, freshStarts, remoteFresh };
}

function startRows({ restart: restarts, freshStarts }: Awaited<ReturnType<typeof startRuns>>, nodeMs: number): [string, string, string][] {
  const fresh = median(freshStarts.map((start) => start.totalMs));
  const restart = restarts.map((start) => start.totalMs);
  return [
    ['(6) kill -9 daemon (left a zombie) -> next acquire, local engine', `${median(restart).toFixed(0)} ms`, `${(median(restart) / nodeMs).toFixed(2)}x node -e 0; max ${Math.max(...restart).toFixed(0)} ms of ${RESTART_RUNS}; target < 1000 ms (was 20 s)`],
    coldSummaryRow('    after kill -9', restarts),
    ['(6) no daemon at all -> auto-start and first plan', `${fresh.toFixed(0)} ms`, `${(fresh / nodeMs).toFixed(2)}x node -e 0 (goal <= 3); the kill -9 figure minus this is what the dead daemon costs`],
    ...coldPhaseRows(freshStarts),
  ];
}

/** (7) Node's own start, the floor of every figure of a start. */
async function nodeStart(env: NodeJS.ProcessEnv): Promise<number> {
  const runs: number[] = [];
  for (let run = 0; run < CLI_RUNS; run += 1) runs.push(await timed(() => execa(process.execPath, ['-e', '0'], { env, timeout: 30_000 })));
  return median(runs);
}

function printRows(rows: [string, string, string][], runs: string): void {
  const width = Math.max(...rows.map(([name]) => name.length));
  process.stdout.write(`sandboxd benchmark (node ${process.version}${SHORT ? ', short' : ''}; ${runs}; medians)\n`);
  for (const [name, value, note] of rows) process.stdout.write(`${name.padEnd(width)}  ${value.padStart(9)}  ${note}\n`);
}

async function main(): Promise<void> {
  const cleanup = new Cleanup();
  try {
    const sandbox = makeSandbox(cleanup);
    cleanup.add(() => {
      removeTunnelRoots(sandbox.env.SANDBOXD_STATE_DIR);
    });
    // `SANDBOXD_BENCH_KEEP=DIR`: the state and log dirs copied there at the end, to study what the
    // bench's daemons left (its first plans run after every other row, on that state dir).
    const keep = process.env.SANDBOXD_BENCH_KEEP;
    if (keep !== undefined && keep !== '') {
      cleanup.add(() => execa('cp', ['-a', sandbox.env.SANDBOXD_STATE_DIR, sandbox.env.SANDBOXD_LOG_DIR, keep]));
    }
    const sshd = await startSshd(path.join(sandbox.dir, 'vm'), cleanup);
    const agent = await startAgent(sandbox.dir, cleanup);
    const conf = path.join(sandbox.dir, 'containers.conf');
    writeFileSync(conf, `[engine]\nactive_service = "bench"\n[engine.service_destinations.bench]\nuri = "ssh://root@127.0.0.1:${sshd.port}/run/podman/podman.sock"\nidentity = "${sshd.clientKey}"\n`);
    const env: NodeJS.ProcessEnv = { ...process.env, ...sandbox.env, SSH_AUTH_SOCK: agent.socket, CONTAINERS_CONF: conf, SANDBOXD_SSH_BRIDGE: 'tunnel' };
    cleanup.add(() => requestShutdown(env).catch(() => undefined));
    await ensureDaemon({ paths: clientPaths(env), env, autoStart: true });
    // A local engine (mount bridge), so the figures are sandboxd's own.
    const localEnv: NodeJS.ProcessEnv = { ...process.env, ...sandbox.env, SSH_AUTH_SOCK: agent.socket, SANDBOXD_SSH_BRIDGE: 'mount' };
    if (ONLY_LLXPRT) {
      printRows(await llxprtRows(localEnv, sandbox.dir), `${String(LLXPRT_RUNS)} runs per runtime and shape`);
      return;
    }
    const transport = (socketFloor: number[]) =>
      transportRows({ socketPath: clientPaths(env).socketPath, dir: sandbox.dir, bun: BUN, coldRuns: TRANSPORT_COLD_RUNS, warmGets: TRANSPORT_GETS, socketFloor });
    const git = () => gitRows({ env: localEnv, dir: sandbox.dir, firstRuns: GIT_FIRST_RUNS, commits: GIT_COMMITS });
    if (ONLY_GIT) {
      printRows(await git(), `${String(GIT_FIRST_RUNS)} first acquires, ${String(GIT_COMMITS)} commits`);
      return;
    }
    if (ONLY_TRANSPORT) {
      const socketFloor = await httpFloor(sandbox.dir, WARM_RUNS);
      printRows([socketFloorRow(socketFloor), ...(await transport(socketFloor))], `${String(TRANSPORT_COLD_RUNS)} cold runs, ${String(TRANSPORT_GETS)} warm GETs per runtime`);
      return;
    }
    if (ONLY_COLD) {
      const nodeMs = await nodeStart(localEnv);
      const runs = await runOverhead(localEnv, sandbox.dir);
      await stopDaemon(env);
      printRows([['(7) node -e 0 (floor)', `${nodeMs.toFixed(0)} ms`, ''], ...runRows(runs, nodeMs), ...startRows(await startRuns(localEnv, null), nodeMs)], `${String(RESTART_RUNS)} starts, ${String(CLI_RUNS)} runs, ${String(RUN_OVERHEAD_RUNS)} turns of row 9`);
      return;
    }
    const acquire = () => acquireSession({ engine: 'podman', env, heartbeat: false });

    // Warm up ssh, podman and the daemon's code paths once, unmeasured.
    await bareHandshake(sshd);
    await (await acquire()).release();
    await removeAllTunnels(env);

    const bare: number[] = [];
    const baseline: number[] = [];
    const cold: number[] = [];
    for (let run = 0; run < COLD_RUNS; run += 1) {
      bare.push(await bareHandshake(sshd));
      baseline.push(await baselineSession(sshd, agent.socket, path.join(sandbox.dir, `baseline-${run}.sock`)));
      let session: Awaited<ReturnType<typeof acquire>> | null = null;
      cold.push(await timed(async () => (session = await acquire())));
      await (session as Awaited<ReturnType<typeof acquire>> | null)?.release();
      await removeAllTunnels(env);
    }

    // The floors for any request on this machine: node:http itself, then one empty round trip to the daemon.
    const floor = await httpFloor(sandbox.dir, WARM_RUNS);
    const roundTrip: number[] = [];
    for (let run = 0; run < WARM_RUNS; run += 1) roundTrip.push(await timed(() => getStatus(env)));

    const holder = await acquire();
    const warm: number[] = [];
    for (let run = 0; run < WARM_RUNS; run += 1) {
      let session: Awaited<ReturnType<typeof acquire>> | null = null;
      warm.push(await timed(async () => (session = await acquire())));
      await (session as Awaited<ReturnType<typeof acquire>> | null)?.release();
    }

    // The shape users meet: sessions minutes apart. The bridge is still up (the holder keeps it),
    // but what git and podman answered is older than its 10 s backstop.
    const idle: number[] = [];
    for (let run = 0; run < IDLE_RUNS; run += 1) {
      await new Promise((resolve) => setTimeout(resolve, Math.max(DISCOVERY_TTL_MS, GIT_FACTS_TTL_MS) + 1_000));
      let session: Awaited<ReturnType<typeof acquire>> | null = null;
      idle.push(await timed(async () => (session = await acquire())));
      await (session as Awaited<ReturnType<typeof acquire>> | null)?.release();
    }

    // (8) the same warm acquire with HELD sessions held and heartbeating, and what the
    // daemon costs meanwhile (RSS, CPU while nothing but heartbeats happens).
    const daemonPid = (await getStatus(env)).pid;
    const held: Awaited<ReturnType<typeof acquire>>[] = [];
    for (let run = 0; run < HELD; run += 1) held.push(await acquireSession({ engine: 'podman', env }));
    // What the acquires set off finishes first: a refresh of an old answer waits for half a second
    // without requests, then spawns git and podman, whose CPU is not the idle daemon's.
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    const cpuBefore = processCpuMs(daemonPid);
    await new Promise((resolve) => setTimeout(resolve, IDLE_WINDOW_MS));
    const idleCpuPercent = ((processCpuMs(daemonPid) - cpuBefore) / IDLE_WINDOW_MS) * 100;
    const heldRssMb = processRssMb(daemonPid);
    const warmHeld: number[] = [];
    for (let run = 0; run < WARM_RUNS; run += 1) {
      let session: Awaited<ReturnType<typeof acquire>> | null = null;
      warmHeld.push(await timed(async () => (session = await acquire())));
      await (session as Awaited<ReturnType<typeof acquire>> | null)?.release();
    }
    await Promise.all(held.map((session) => session.release()));
    await holder.release();
    await removeAllTunnels(env);

    const runs = await runOverhead(env, sandbox.dir);
    await removeAllTunnels(env);

    let sessions: Awaited<ReturnType<typeof acquire>>[] = [];
    const concurrentMs = await timed(async () => (sessions = await Promise.all(Array.from({ length: CONCURRENT }, acquire))));
    // The VM directory is never on ssh's argv (it is a capability): count the tunnel ssh by port.
    const sshCount = tunnelSshPids(sshd.port).length;
    await Promise.all(sessions.map((s) => s.release()));
    await removeAllTunnels(env);

    // (7) what a person waits for on every CLI call, against Node's own start.
    // The three commands take turns, run by run: this machine's speed drifts, and a drift must
    // not land on one command's block of runs and skew the ratios.
    const cliStarts = async (commands: string[][]): Promise<number[]> => {
      const runs = commands.map((): number[] => []);
      for (let run = 0; run < CLI_RUNS; run += 1) {
        for (const [index, args] of commands.entries()) runs[index]?.push(await timed(() => execa(process.execPath, args, { env, timeout: 30_000 })));
      }
      return runs.map(median);
    };
    const [nodeMs = 0, versionMs = 0, statusMs = 0] = await cliStarts([['-e', '0'], [CLI, '--version'], [CLI, 'status']]);
    const llxprt = await llxprtRows(localEnv, sandbox.dir);
    const transportCost = await transport(floor);
    const gitCost = await git();

    await stopDaemon(env);
    const starts = await startRuns(localEnv, env);
    const bareMs = median(bare);
    const baselineMs = median(baseline);
    const coldMs = median(cold);
    const rows: [string, string, string][] = [
      ['(5) bare ssh handshake (floor)', `${bareMs.toFixed(0)} ms`, ''],
      ['(4) per-session baseline (rm, ssh -R, poll test -S, teardown)', `${baselineMs.toFixed(0)} ms`, ''],
      ['(1) cold acquire via client library', `${coldMs.toFixed(0)} ms`, `${(coldMs / bareMs).toFixed(2)}x bare (target <= 1.3), ${(coldMs / baselineMs).toFixed(2)}x baseline (target <= 0.7)`],
      socketFloorRow(floor),
      ['    empty round trip (GET /v1/status) p50', `${median(roundTrip).toFixed(2)} ms`, `p99 ${percentile(roundTrip, 99).toFixed(2)} ms (${(percentile(roundTrip, 99) / percentile(floor, 99)).toFixed(2)}x the floor's p99)`],
      ['(2) warm acquire p50', `${median(warm).toFixed(2)} ms`, `${(median(warm) / median(roundTrip)).toFixed(2)}x the empty round trip's p50 (goal <= 3)`],
      ['(2) warm acquire p99', `${percentile(warm, 99).toFixed(2)} ms`, `${(percentile(warm, 99) / percentile(floor, 99)).toFixed(2)}x the socket floor's p99 (goal <= 3)`],
      ['(2) warm acquire after 11 s idle (bridge up, caches past their TTL)', `${median(idle).toFixed(2)} ms`, `max ${Math.max(...idle).toFixed(2)} ms of ${String(IDLE_RUNS)}; the shape of sessions minutes apart`],
      [`(3) ${CONCURRENT} sessions at once, cold: wall time`, `${concurrentMs.toFixed(0)} ms`, `${(concurrentMs / (2 * baselineMs)).toFixed(2)}x two baseline sessions (target < 1)`],
      [`(3) ${CONCURRENT} sessions at once: ssh processes`, String(sshCount), 'target 1'],
      [`(8) warm acquire p99 with ${String(HELD)} sessions held`, `${percentile(warmHeld, 99).toFixed(2)} ms`, `${(percentile(warmHeld, 99) / percentile(warm, 99)).toFixed(2)}x the daemon without them (target <= 1.5)`],
      [`(8) daemon RSS with ${String(HELD)} sessions`, `${heldRssMb.toFixed(0)} MB`, 'target <= 150 MB'],
      [`(8) daemon CPU while ${String(HELD)} sessions only heartbeat`, `${idleCpuPercent.toFixed(2)} %`, `of one core over ${String(IDLE_WINDOW_MS / 1000)} s (target < 2 %)`],
      ...runRows(runs, nodeMs),
      ['(7) node -e 0 (floor)', `${nodeMs.toFixed(0)} ms`, ''],
      ['(7) sandboxd --version', `${versionMs.toFixed(0)} ms`, `${(versionMs / nodeMs).toFixed(2)}x node -e 0 (target <= 2)`],
      ['(7) sandboxd status (daemon running)', `${statusMs.toFixed(0)} ms`, `${(statusMs / nodeMs).toFixed(2)}x node -e 0 (target <= 2)`],
      ...startRows(starts, nodeMs),
      ['    the same through the remote podman connection', `${median(starts.remoteFresh).toFixed(0)} ms`, `+ one ssh login to learn what the VM shares (bare handshake ${bareMs.toFixed(0)} ms)`],
      ...llxprt,
      ...transportCost,
      ...gitCost,
    ];
    printRows(rows, `${String(COLD_RUNS)} cold runs, ${String(WARM_RUNS)} warm runs`);
  } finally {
    await cleanup.run();
  }
}

await main();
