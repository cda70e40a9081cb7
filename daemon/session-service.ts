import path from 'node:path';
import type { AcquireInput, AcquireResponse, SessionInfo } from '../shared/contracts/sessions.js';
import type { Plan } from '../shared/contracts/plan.js';
import type { Platform } from '../shared/paths.js';
import type { Lease } from './bridges/bridge.js';
import { randomId } from './ids.js';
import type { ProcessProbe } from './process-identity.js';
import { dedupeMounts, flattenArgs, relabelFor } from './plan/flatten.js';
import { planGit, type GitConfigFile } from './plan/git.js';
import { planSsh, type SshDeps } from './plan/ssh.js';
import type { Clock, SessionRegistry } from './session-registry.js';

const ROOT_USER = { uid: 0, gid: 0, home: '/root' };

export interface SessionServiceDeps {
  platform: Platform;
  hostHome: string;
  clock: Clock;
  probe: ProcessProbe;
  registry: SessionRegistry;
  ssh: SshDeps;
  findGitFiles(hostHome: string): Promise<GitConfigFile[]>;
  leaseTtlMs: number;
}

/** Builds a session's plan from its parts and registers the lease that keeps its bridges alive. */
export class SessionService {
  constructor(private readonly deps: SessionServiceDeps) {}

  async acquire(input: AcquireInput): Promise<AcquireResponse> {
    const { deps } = this;
    deps.registry.assertCapacity();
    // Independent lookups run together: a warm acquire is a few small reads and one connect.
    const [clientStartTime, ssh, configFiles] = await Promise.all([
      deps.probe.startTime(input.client.pid),
      planSsh(input, deps.ssh),
      deps.findGitFiles(deps.hostHome),
    ]);
    const leases: Lease[] = ssh.leases;
    try {
      const user = input.containerUser ?? ROOT_USER;
      const relabel = relabelFor(input.engine, deps.platform);
      const git = planGit({ hostHome: deps.hostHome, containerHome: path.resolve(user.home), configFiles, relabel });
      const body: Omit<Plan, 'args'> = {
        mounts: dedupeMounts([...ssh.mounts, ...git.mounts]),
        env: { ...git.env, ...ssh.env },
        flags: ssh.flags,
        warnings: ssh.warnings,
      };
      const now = new Date(deps.clock.now()).toISOString();
      const session: SessionInfo = {
        id: randomId('ses'),
        engine: input.engine,
        label: input.label ?? null,
        clientPid: input.client.pid,
        createdAt: now,
        lastHeartbeatAt: now,
        ssh: ssh.ssh,
      };
      deps.registry.add(session, clientStartTime, leases);
      return {
        session,
        plan: { ...body, args: flattenArgs(body) },
        leaseTtlMs: deps.leaseTtlMs,
        heartbeatIntervalMs: Math.max(1000, Math.floor(deps.leaseTtlMs / 3)),
      };
    } catch (error) {
      for (const lease of leases) lease.release();
      throw error;
    }
  }
}
