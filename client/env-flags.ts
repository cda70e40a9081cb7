import { SandboxdError } from '../shared/errors.js';

const TRUE = new Set(['1', 'true', 'yes', 'on']);
const FALSE = new Set(['', '0', 'false', 'no', 'off']);

/**
 * A yes/no environment variable as people write them (`1`, `true`, `yes`, any case); a value that
 * is neither is an error naming the variable, never silently read as "no".
 */
export function envFlag(env: NodeJS.ProcessEnv, name: string): boolean {
  const raw = env[name];
  if (raw === undefined) return false;
  const value = raw.trim().toLowerCase();
  if (TRUE.has(value)) return true;
  if (FALSE.has(value)) return false;
  throw new SandboxdError('BAD_REQUEST', `${name} is "${raw}"; it must be 1, true or yes (or 0, false, no)`, {
    remedy: `Fix or unset ${name}.`,
  });
}
