import os from 'node:os';
import type { Platform } from '../../shared/paths.js';
import { installedService, runManaged, type ManagerInputs } from './manager.js';
import { execRunner, type CommandRunner, type ServiceManager } from './service.js';

export function managerInputs(env: NodeJS.ProcessEnv, platform: Platform): ManagerInputs {
  return { platform, env, home: env.HOME ?? os.homedir(), uid: process.getuid?.() ?? 0 };
}

/**
 * Auto-start under `sandboxd install`: the service manager starts the daemon, so a client never
 * races the one launchd or systemd is starting. Null when no service is installed, or when its
 * manager cannot start it (not loaded): then the client starts the daemon itself.
 */
export async function startThroughService(env: NodeJS.ProcessEnv, platform: Platform, run: CommandRunner = execRunner): Promise<ServiceManager | null> {
  const manager = await installedService(managerInputs(env, platform));
  if (manager === null) return null;
  try {
    await runManaged(manager.startArgv, run);
    return manager;
  } catch {
    return null;
  }
}
