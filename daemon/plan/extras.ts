import path from 'node:path';
import type { ClientEnv } from '../../shared/contracts/sessions.js';
import type { Mount } from '../../shared/contracts/plan.js';
import { dualHomeMounts } from './dual-home.js';
import { canonicalIfExists } from './mount-spec.js';

const CLOUD_DIRS = ['.config/gcloud', '.aws'];
const TERMINAL_ENV = ['TERM', 'COLORTERM'] as const;

export interface CloudInput {
  hostHome: string;
  containerHome: string;
  googleApplicationCredentials: string | undefined;
  relabel: Mount['relabel'];
}

/** Opt-in, read-only cloud credentials (DESIGN §8): what gcloud and the AWS CLI read. */
export async function cloudCredentialMounts(input: CloudInput): Promise<{ mounts: Mount[]; env: Record<string, string> }> {
  const base = { readOnly: true, purpose: 'cloud credentials', relabel: input.relabel };
  const mounts: Mount[] = [];
  for (const dir of CLOUD_DIRS) {
    const file = path.join(input.hostHome, dir);
    const source = await canonicalIfExists(file);
    if (source !== null) mounts.push(...dualHomeMounts({ path: file, source }, input.hostHome, input.containerHome, base));
  }
  const env: Record<string, string> = {};
  const gac = input.googleApplicationCredentials;
  if (gac !== undefined && path.isAbsolute(gac)) {
    const source = await canonicalIfExists(gac);
    if (source !== null) {
      mounts.push({ source, target: gac, ...base });
      env.GOOGLE_APPLICATION_CREDENTIALS = gac;
    }
  }
  return { mounts, env };
}

export interface ContainerEnv {
  /** Set with `-e NAME=value`: the terminal's own variables, which are not secret. */
  env: Record<string, string>;
  /** Passed by name (`-e NAME`): the values travel in the engine's environment, never on argv. */
  spawnEnv: Record<string, string>;
  warnings: string[];
}

/**
 * TERM and COLORTERM pass through; anything else only when the session names it, and never over a
 * variable the plan itself sets (`--pass-env SSH_AUTH_SOCK` would cut the container off its agent).
 */
export function containerEnv(clientEnv: ClientEnv, passEnv: Record<string, string>, planOwned: ReadonlySet<string>): ContainerEnv {
  const env: Record<string, string> = {};
  for (const name of TERMINAL_ENV) {
    const value = clientEnv[name];
    if (value !== undefined && !(name in passEnv)) env[name] = value;
  }
  const spawnEnv: Record<string, string> = {};
  const warnings: string[] = [];
  for (const [name, value] of Object.entries(passEnv)) {
    if (planOwned.has(name)) warnings.push(`--pass-env ${name} is ignored: sandboxd sets ${name} in the container itself`);
    else spawnEnv[name] = value;
  }
  return { env, spawnEnv, warnings };
}
