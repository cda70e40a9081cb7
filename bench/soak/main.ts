import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { acquireSession, clientPaths, ensureDaemon, getStatus, listSessions, listTunnels, requestShutdown } from '../../client/index.js';
import { Cleanup, makeSandbox, startAgent, waitFor } from '../../test/helpers.js';
import { removeTunnelRoot, startSshd, type Sshd } from '../../test/lab/sshd.js';
import { DAEMON_FAULTS, emptyChaos, runChaos, TUNNEL_FAULTS, type Action, type ChaosStats } from './chaos.js';
import { ClientPool, emptyStats } from './clients.js';
import { fuzz, holdConnections } from './fuzz.js';
import { daemonResources, heldViolations, plantedViolations, quietViolations, snapshot, tunnelSshPids, vmSockets } from './invariants.js';
import { execFileSync } from 'node:child_process';
import { percentile } from '../stats.js';

/**
 * `npm run soak`, the chaos and fuzz suite: client processes doing acquire → use → release through the library on
 * the lab (a loopback sshd standing in for the Podman VM, a real ssh-agent), while a chaos loop
 * kills tunnel ssh processes, SIGKILLs clients mid-lease, restarts sshd, and SIGSTOPs and SIGKILLs
 * the daemon; after each phase the daemon's view is checked against the operating system's; then
 * a protocol fuzzer. Bounded in time; `--short` is the CI variant. Last line:
 * `invariant violations: N`, exit 1 unless N is 0.
 */
const SHORT = process.argv.includes('--short');
const CLIENTS = Number(argValue('--clients') ?? (SHORT ? 8 : 50));
const PHASE_MS = Number(argValue('--seconds') ?? (SHORT ? 12 : 60)) * 1000;
const FUZZ_ROUNDS = SHORT ? 4 : 40;
const CHAOS_INTERVAL_MS = SHORT ? 2_500 : 4_000;
/** Sweep (2 s) + idle bound (SANDBOXD_TUNNEL_IDLE below) + margin for a loaded machine. */
const QUIET_BOUND_MS = 20_000;
/** How long frozen clients' in-flight requests may take to settle (a cold tunnel after a restart). */
const SETTLE_BOUND_MS = 20_000;
const FD_SLACK = 16;
const RSS_SLACK_BYTES = 48 * 1024 * 1024;

function argValue(name: string): string | undefined {
  const index = process.argv.indexOf(name);
  return index === -1 ? undefined : process.argv[index + 1];
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Lab {
  env: NodeJS.ProcessEnv;
  /** The planter's repository. */
  repo: string;
  sshd: Sshd;
  sandboxDir: string;
  skip: Set<string>;
  canary: string;
}

async function setUp(cleanup: Cleanup): Promise<Lab> {
  const sandbox = makeSandbox(cleanup);
  const sshdDir = path.join(sandbox.dir, 'vm');
  const sshd = await startSshd(sshdDir, cleanup);
  const agent = await startAgent(sandbox.dir, cleanup);
  const conf = path.join(sandbox.dir, 'containers.conf');
  writeFileSync(conf, `[engine]\nactive_service = "soak"\n[engine.service_destinations.soak]\nuri = "ssh://root@127.0.0.1:${String(sshd.port)}/run/podman/podman.sock"\nidentity = "${sshd.clientKey}"\n`);
  const repo = path.join(sandbox.dir, 'planted-repo');
  mkdirSync(repo);
  execFileSync('git', ['init', '-q', '-b', 'main'], { cwd: repo });
  const canary = path.join(sandbox.dir, 'canary');
  mkdirSync(path.join(canary, 'inner'), { recursive: true });
  writeFileSync(path.join(canary, 'inner', 'keep.txt'), 'must not change\n');
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    ...sandbox.env,
    SSH_AUTH_SOCK: agent.socket,
    CONTAINERS_CONF: conf,
    SANDBOXD_SSH_BRIDGE: 'tunnel',
    SANDBOXD_TUNNEL_IDLE: '2',
  };
  cleanup.add(() => requestShutdown(env).catch(() => undefined));
  const skip = new Set([sandbox.env.SANDBOXD_RUNTIME_DIR, sandbox.env.SANDBOXD_STATE_DIR, sandbox.env.SANDBOXD_LOG_DIR, sshdDir, repo]);
  return { env, repo, sshd, sandboxDir: sandbox.dir, skip, canary };
}

function daemonPidOf(env: NodeJS.ProcessEnv): number | null {
  try {
    return (JSON.parse(readFileSync(clientPaths(env).pidPath, 'utf8')) as { pid: number }).pid;
  } catch {
    return null;
  }
}

class Checker {
  readonly violations: string[] = [];
  readonly vmRoots = new Set<string>();
  maxRestarts = 0;

  constructor(private readonly lab: Lab) {}

  private remember(tunnels: Awaited<ReturnType<typeof listTunnels>>): void {
    for (const tunnel of tunnels) {
      this.vmRoots.add(path.dirname(path.dirname(tunnel.socketPath)));
      this.maxRestarts = Math.max(this.maxRestarts, tunnel.restarts);
    }
  }

  /** Clients frozen mid-lease; the daemon's counts must match what holds them. */
  async held(phase: string, clients: ClientPool, daemonRestarted: boolean): Promise<void> {
    const { env } = this.lab;
    const pids = clients.pids;
    for (const pid of pids) process.kill(pid, 'SIGSTOP');
    try {
      // A request the frozen clients sent before the freeze still completes (an acquire holds its
      // tunnel lease while the tunnel comes up, then registers its session): only a mismatch that
      // outlasts the settle bound is one the daemon keeps.
      let found: string[] = [];
      const deadline = performance.now() + SETTLE_BOUND_MS;
      do {
        await sleep(500);
        const [sessions, tunnels] = await Promise.all([listSessions(env), listTunnels(env)]);
        this.remember(tunnels);
        const settled = tunnels.every((tunnel) => tunnel.state === 'ready');
        found = heldViolations({ sessions, tunnels, sshPids: tunnelSshPids(this.lab.sshd.port) }, { daemonRestarted });
        if (settled && found.length === 0) break;
      } while (performance.now() < deadline);
      this.violations.push(...found.map((violation) => `${phase} (held): ${violation}`));
    } finally {
      for (const pid of pids) process.kill(pid, 'SIGCONT');
    }
  }

  /**
   * Every client stopped, bounds passed: nothing of theirs may remain. A halted tunnel removes the
   * bind sockets of generations that died unpublished with logins of its own, retried while the VM
   * is down, after it left the daemon's list: those are waited for within the same bound.
   */
  async quiet(phase: string): Promise<void> {
    const { env } = this.lab;
    await waitFor(
      async () =>
        (await listSessions(env)).length === 0 &&
        (await listTunnels(env)).length === 0 &&
        tunnelSshPids(this.lab.sshd.port).length === 0 &&
        vmSockets(this.vmRoots).length === 0,
      'the daemon to be idle',
      QUIET_BOUND_MS,
    ).catch(() => undefined);
    const [sessions, tunnels] = await Promise.all([listSessions(env), listTunnels(env)]);
    this.remember(tunnels);
    const found = quietViolations({ sessions, tunnels, sshPids: tunnelSshPids(this.lab.sshd.port), sockets: vmSockets(this.vmRoots) });
    this.violations.push(...found.map((violation) => `${phase} (idle): ${violation}`));
  }
}

interface Drift {
  phase: string;
  fds: number;
  rssMb: number;
  note: string;
}

async function main(): Promise<void> {
  const cleanup = new Cleanup();
  let violationCount = 0;
  try {
    const lab = await setUp(cleanup);
    const { env } = lab;
    const checker = new Checker(lab);
    cleanup.add(() => {
      // The roots and any bind socket beside them (where a violation was reported).
      for (const root of checker.vmRoots) removeTunnelRoot(root);
    });
    await ensureDaemon({ paths: clientPaths(env), env, autoStart: true });
    await (await acquireSession({ engine: 'podman', env, heartbeat: false })).release();
    await checker.quiet('warm-up');
    let baselinePid = daemonPidOf(env);
    let baseline = baselinePid === null ? null : daemonResources(baselinePid);
    const drift: Drift[] = [];
    const measureDrift = (phase: string): void => {
      const pid = daemonPidOf(env);
      const now = pid === null ? null : daemonResources(pid);
      if (now === null || baseline === null) return;
      if (pid !== baselinePid) {
        drift.push({ phase, fds: 0, rssMb: 0, note: `daemon restarted (pid ${String(baselinePid)} -> ${String(pid)}); new baseline` });
        baselinePid = pid;
        baseline = now;
        return;
      }
      const fds = now.fds - baseline.fds;
      const rss = now.rssBytes - baseline.rssBytes;
      drift.push({ phase, fds, rssMb: rss / 1024 / 1024, note: '' });
      if (fds > FD_SLACK) checker.violations.push(`${phase}: daemon fds grew by ${String(fds)}`);
      if (rss > baseline.rssBytes * 0.5 + RSS_SLACK_BYTES) checker.violations.push(`${phase}: daemon RSS grew by ${(rss / 1024 / 1024).toFixed(0)} MB`);
    };

    const stats = emptyStats();
    const chaos: ChaosStats = emptyChaos();
    const phases: [string, Record<string, Action> | null][] = [
      ['steady', null],
      ['tunnel chaos', TUNNEL_FAULTS],
      ['daemon chaos', DAEMON_FAULTS],
    ];
    for (const [phase, faults] of phases) {
      const pidAtStart = daemonPidOf(env);
      const clients = new ClientPool(env, stats);
      clients.spawn(CLIENTS - 1);
      clients.spawn(1, { cwd: lab.repo });
      const until = performance.now() + PHASE_MS;
      if (faults === null) await sleep(PHASE_MS);
      else await runChaos(faults, { env, sshd: lab.sshd, clients, daemonPid: () => daemonPidOf(env) }, chaos, until, CHAOS_INTERVAL_MS);
      // A daemon killed during the phase: the one answering now serves its predecessor's sockets.
      await checker.held(phase, clients, daemonPidOf(env) !== pidAtStart);
      await clients.stopAll();
      await checker.quiet(phase);
      // The planter's last session has ended and its work came home (or, after a kill -9, the next
      // daemon's sync brought it): the host's git dir holds nothing the sandbox planted.
      checker.violations.push(...plantedViolations(stats.planted).map((violation) => `${phase}: ${violation}`));
      measureDrift(phase);
    }

    const alive = async () => (await getStatus(env).catch(() => null)) !== null;
    const before = snapshot(lab.sandboxDir, lab.skip);
    const fuzzed = await fuzz(clientPaths(env).socketPath, lab.canary, FUZZ_ROUNDS, alive);
    const held = await holdConnections(clientPaths(env).socketPath, SHORT ? 100 : 400, 5, alive);
    const after = snapshot(lab.sandboxDir, lab.skip);
    if (before !== after) checker.violations.push('fuzz: files outside the daemon\'s directories changed');
    checker.violations.push(...fuzzed.unexpected.map((what) => `fuzz: ${what}`));
    if (!held.answeredMeanwhile) checker.violations.push('fuzz: status did not answer while idle connections were held');
    for (const status of held.slowStatuses) if (!['408', 'timeout', 'closed'].includes(status)) checker.violations.push(`fuzz: slow-loris got ${status}`);
    if (!(await alive())) checker.violations.push('fuzz: the daemon stopped answering');
    measureDrift('fuzz');

    const errors = [...stats.errors].map(([code, count]) => `${code} ${String(count)}`).join(', ') || 'none';
    const rows: [string, string][] = [
      ['clients per phase, phase length', `${String(CLIENTS)}, ${String(PHASE_MS / 1000)} s`],
      ['cycles (acquire, use, release)', `${String(stats.cycles)} (${String(stats.used)} reached the agent through the plan)`],
      ['files planted in the sandbox git dir', String(stats.planted.length)],
      ['errors by code', errors],
      ['acquire p50 / p99 under chaos', `${percentile(stats.acquireMs, 50).toFixed(1)} / ${percentile(stats.acquireMs, 99).toFixed(1)} ms`],
      ['faults injected', [...chaos.actions].map(([name, count]) => `${name} ×${String(count)}`).join(', ') || 'none'],
      ['tunnel restarts (max seen on one tunnel)', String(checker.maxRestarts)],
      ['max heal time', chaos.healMs.length === 0 ? 'n/a' : `${Math.max(...chaos.healMs).toFixed(0)} ms`],
      ['kill -9 daemon -> answering again', chaos.recoveryMs.length === 0 ? 'n/a' : `${chaos.recoveryMs.map((ms) => ms.toFixed(0)).join(', ')} ms`],
      ['faults that did not heal', chaos.unhealed.join(', ') || 'none'],
      ['daemon fd / RSS drift', drift.map((d) => (d.note === '' ? `${d.phase}: ${d.fds >= 0 ? '+' : ''}${String(d.fds)} fds, ${d.rssMb >= 0 ? '+' : ''}${d.rssMb.toFixed(1)} MB` : `${d.phase}: ${d.note}`)).join('; ')],
      ['fuzz requests (status: count)', `${String(fuzzed.requests)} (${[...fuzzed.statuses].map(([status, count]) => `${status}: ${String(count)}`).join(', ')})`],
    ];
    for (const what of chaos.unhealed) checker.violations.push(`chaos: ${what} did not heal within the bound`);
    const width = Math.max(...rows.map(([name]) => name.length));
    process.stdout.write(`sandboxd soak (${SHORT ? 'short' : 'full'}; node ${process.version})\n`);
    for (const [name, value] of rows) process.stdout.write(`${name.padEnd(width)}  ${value}\n`);
    for (const violation of checker.violations) process.stdout.write(`violation: ${violation}\n`);
    violationCount = checker.violations.length;
    process.stdout.write(`invariant violations: ${String(violationCount)}\n`);
  } finally {
    await cleanup.run();
  }
  process.exitCode = violationCount === 0 ? 0 : 1;
}

await main();
