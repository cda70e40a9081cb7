import os from 'node:os';
import type { Platform } from '../../shared/paths.js';
import { installedService, programProblem, runManaged, type ManagerInputs } from './manager.js';
import { commandRunner, managerEnvironment, type CommandRunner, type ServiceManager } from './service.js';

export function managerInputs(env: NodeJS.ProcessEnv, platform: Platform): ManagerInputs {
  return { platform, env, home: env.HOME ?? os.homedir(), uid: process.getuid?.() ?? 0 };
}

/** Runs the service manager's commands so they find the user's manager from this shell. */
export async function managerRunner(env: NodeJS.ProcessEnv, platform: Platform): Promise<CommandRunner> {
  return commandRunner(await managerEnvironment(env, platform, process.getuid?.() ?? 0));
}

/** How auto-start went through an installed service: started by it, or not, and why. */
export type ServiceStart = { manager: ServiceManager } | { manager: null; reason: string | null };

/**
 * Auto-start under `sandboxd install`: the service manager starts the daemon, so a client never
 * races the one launchd or systemd is starting. No manager when no service is installed (no
 * reason), or when it cannot start the daemon (a reason): its program or entry is gone (launchd
 * would accept the start and fail to spawn it), or its manager refuses. Then the client starts
 * the daemon itself.
 */
export async function startThroughService(env: NodeJS.ProcessEnv, platform: Platform, run?: CommandRunner): Promise<ServiceStart> {
  const manager = await installedService(managerInputs(env, platform));
  if (manager === null) return { manager: null, reason: null };
  const problem = await programProblem(manager);
  if (problem !== null) return { manager: null, reason: `${problem}; starting the daemon without ${manager.kind} (run \`sandboxd install\` again to fix the service)` };
  try {
    await runManaged(manager.startArgv, run ?? (await managerRunner(env, platform)));
    return { manager };
  } catch (error) {
    return { manager: null, reason: `${manager.kind} did not start it (${error instanceof Error ? error.message : String(error)}); starting the daemon without it` };
  }
}
