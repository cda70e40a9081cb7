/*
 * The hosts a session's git may ask the host's credential helpers about (`--git-credentials`),
 * checked and written one way on both sides: the client normalises what the user typed, the
 * daemon refuses anything not already in that form, and the daemon's matcher compares requests
 * with the same function. No zod here: the CLI loads it before any schema.
 */
import { isIPv6 } from 'node:net';
import { SandboxdError } from './errors.js';

/** Each host is a helper entry in the sandbox's git config and a line of `sessions ls`. */
export const MAX_GIT_CREDENTIAL_HOSTS = 16;
/** The longest `host:port` accepted: a DNS name is at most 253 characters. */
export const MAX_GIT_CREDENTIAL_HOST_LENGTH = 260;

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
const PORT = /^[1-9][0-9]{0,4}$/;
const DEFAULT_HTTPS_PORT = '443';

function isHostname(name: string): boolean {
  return name.length <= 253 && name.split('.').every((label) => LABEL.test(label));
}

/**
 * `host`, `host:port`, `[v6]` or `[v6]:port` in the one form git's credential protocol names an
 * https origin by (lower case, port 443 left out), or why it is not one. No scheme, path, user,
 * wildcard or space: a credential is asked for by exactly one origin.
 */
export function normalizeCredentialHost(text: string): { host: string } | { error: string } {
  const value = text.trim().toLowerCase();
  if (value === '') return { error: 'is empty' };
  if (value.length > MAX_GIT_CREDENTIAL_HOST_LENGTH) return { error: 'is too long' };
  if (value.includes('://')) return { error: 'has a scheme (name the host only: https is implied)' };
  if (/[/?#]/.test(value)) return { error: 'has a path (name the host only)' };
  if (value.includes('@')) return { error: 'has a user name (name the host only)' };
  if (value.includes('*')) return { error: 'has a wildcard (name each host)' };
  const match = /^(\[[^\]]*\]|[^:[\]]*)(?::([^:]*))?$/.exec(value);
  if (match === null) return { error: 'is not HOST or HOST:PORT' };
  const [, name = '', port] = match;
  const hostOk = name.startsWith('[') ? isIPv6(name.slice(1, -1)) : isHostname(name);
  if (!hostOk) return { error: `names no host (${name === '' ? 'empty' : `"${name}"`} is neither a host name nor an IP address)` };
  if (port !== undefined && (!PORT.test(port) || Number(port) > 65535)) return { error: `has a port that is not 1-65535 ("${port}")` };
  return { host: port === undefined || port === DEFAULT_HTTPS_PORT ? name : `${name}:${port}` };
}

/** Whether a value is already a normalised host (what the daemon accepts on the wire). */
export function isNormalCredentialHost(value: string): boolean {
  const checked = normalizeCredentialHost(value);
  return 'host' in checked && checked.host === value;
}

/**
 * The hosts `HOST[:PORT][,…]` (or a list of them) names, normalised, each once; `source` names
 * where they came from in the error (`--git-credentials`, `SANDBOXD_GIT_CREDENTIALS`).
 */
export function parseCredentialHosts(values: readonly string[], source: string): string[] {
  const hosts: string[] = [];
  for (const text of values.flatMap((value) => value.split(','))) {
    if (text.trim() === '') continue;
    const checked = normalizeCredentialHost(text);
    if ('error' in checked) {
      throw new SandboxdError('GIT_CREDENTIALS_INVALID', `${source}: "${text.trim()}" ${checked.error}`);
    }
    if (!hosts.includes(checked.host)) hosts.push(checked.host);
  }
  if (hosts.length > MAX_GIT_CREDENTIAL_HOSTS) {
    throw new SandboxdError('GIT_CREDENTIALS_INVALID', `${source}: ${String(hosts.length)} hosts; at most ${String(MAX_GIT_CREDENTIAL_HOSTS)} are allowed`);
  }
  return hosts;
}
