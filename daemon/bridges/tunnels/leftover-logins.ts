import type { ChildProcess } from 'node:child_process';
import type { Logger } from '../../os/logger.js';
import { backoffMs, leftoverScript } from '../../podman/ssh-command.js';
import { stopChild } from './generation.js';

/**
 * Last logins a stopped tunnel makes for its leftovers, at most this far apart: together they span
 * an sshd restart on a loaded machine (about 15 s), which is when generations die unpublished.
 */
const MAX_CLEANUP_LOGINS = 10;
const CLEANUP_BACKOFF_CAP_MS = 2_000;

export interface LeftoverLogin {
  /** Spawns one ssh login to the VM that runs the script it reads on stdin. */
  login(): ChildProcess;
  /** How long one login may take: a whole connect plus one `rm`. */
  graceMs: number;
  logger: Logger;
}

/**
 * Bind sockets of generations that died unpublished are otherwise removed by the next
 * generation's script; a stopping tunnel has none, so a last login does it. Such a generation
 * mostly died because the VM's sshd went away, so that login is often refused at first: it is
 * retried with backoff, a bounded number of times. Only the first login is awaited: a session told
 * that the tunnel failed is not kept waiting for a VM that is down, and the retries outlive the halt.
 */
export async function removeLeftovers(how: LeftoverLogin, leftovers: readonly string[]): Promise<void> {
  if (leftovers.length === 0 || (await loginOnce(how, leftovers))) return;
  void retry(how, leftovers);
}

async function retry(how: LeftoverLogin, leftovers: readonly string[]): Promise<void> {
  for (let attempt = 1; attempt < MAX_CLEANUP_LOGINS; attempt += 1) {
    how.logger.warn({ attempt }, 'the login that removes bind sockets left by generations that died failed; trying again');
    await new Promise<void>((resolve) => setTimeout(resolve, backoffMs(attempt - 1, undefined, CLEANUP_BACKOFF_CAP_MS)).unref());
    if (await loginOnce(how, leftovers)) return;
  }
  how.logger.error({ leftovers }, `${String(MAX_CLEANUP_LOGINS)} logins to the VM failed; bind sockets of generations that died stay beside the tunnel root`);
}

/** One login that removes them; true once the VM ran it. */
async function loginOnce(how: LeftoverLogin, leftovers: readonly string[]): Promise<boolean> {
  const child = how.login();
  child.once('error', () => undefined);
  child.stdin?.on('error', () => undefined);
  child.stdin?.write(`${leftoverScript(leftovers)}\n`);
  await stopChild(child, undefined, how.graceMs);
  // The script ends in `exit 0`; ssh answers 255 for a login that failed.
  if (child.exitCode !== 0) return false;
  how.logger.info({ leftovers: leftovers.length }, 'removed bind sockets left by generations that died');
  return true;
}
