import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type { Cleanup } from '../helpers.js';

/** Docker Desktop's fixed path in its VM: on Linux the "VM" is this host, shared by every run on it. */
export const DESKTOP_SOCKET = '/run/host-services/ssh-auth.sock';

/** Held (flock) by the run that emulates Docker Desktop; it names the holder for a run that waits. */
export const DESKTOP_LOCK = '/run/sbx-docker-desktop.lock';

/** Holds the lock until `release` or until this process dies (the pipe closes, `cat` and `flock` exit). */
function lockHolder(waitSeconds: number): Promise<{ release: () => Promise<void> } | null> {
  // -E 75: "held by another" apart from flock's own failures; with -w 0 it does not wait at all.
  const child = spawn('flock', ['-w', String(waitSeconds), '-E', '75', DESKTOP_LOCK, 'sh', '-c', 'echo held; exec cat >/dev/null'], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('close', resolve));
  return new Promise((resolve, reject) => {
    child.stdout.once('data', () => {
      resolve({
        release: async () => {
          child.stdin.end();
          await exited;
        },
      });
    });
    void exited.then((code) => {
      if (code === 75) resolve(null);
      else reject(new Error(`flock ${DESKTOP_LOCK} failed (exit ${String(code)}): ${stderr}`));
    });
  });
}

function answers(socket: string): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = net.connect(socket, () => {
      probe.destroy();
      resolve(true);
    });
    probe.setTimeout(2_000, () => {
      probe.destroy();
      resolve(true);
    });
    probe.on('error', () => {
      resolve(false);
    });
  });
}

/**
 * Takes Docker Desktop's fixed path for this run: waits (at most `waitSeconds`, saying whom for)
 * while another run holds the lock, then holds it until `cleanup` runs. Resolves to why the path
 * cannot be had, or null. Under the lock, a socket nobody answers on is one a killed run left and
 * is replaced; one that answers belongs to something outside the suite and is left alone. The
 * cleanup removes only what this run made: the directory, if it made it, once empty.
 */
export async function takeDesktopPath(cleanup: Cleanup, waitSeconds: number): Promise<string | null> {
  let held = await lockHolder(0);
  if (held === null) {
    const holder = (() => {
      try {
        return readFileSync(DESKTOP_LOCK, 'utf8').trim();
      } catch {
        return '';
      }
    })();
    process.stderr.write(
      `${DESKTOP_SOCKET} (Docker Desktop's fixed path) is in use by another run of the suite${holder === '' ? '' : ` (${holder})`}: waiting up to ${String(waitSeconds)} s for ${DESKTOP_LOCK}\n`,
    );
    held = await lockHolder(waitSeconds);
    if (held === null) throw new Error(`another run held ${DESKTOP_LOCK} for ${String(waitSeconds)} s${holder === '' ? '' : ` (${holder})`}: ${DESKTOP_SOCKET} cannot be emulated now`);
    process.stderr.write(`${DESKTOP_LOCK} is free now: this run emulates Docker Desktop\n`);
  }
  const { release } = held;
  writeFileSync(DESKTOP_LOCK, `pid ${String(process.pid)}, since ${new Date().toISOString()}\n`);
  const dir = path.dirname(DESKTOP_SOCKET);
  if (existsSync(DESKTOP_SOCKET)) {
    if (await answers(DESKTOP_SOCKET)) {
      await release();
      return `${DESKTOP_SOCKET} exists already and something outside the suite answers on it`;
    }
    rmSync(DESKTOP_SOCKET, { force: true });
  }
  const madeDir = !existsSync(dir);
  mkdirSync(dir, { recursive: true });
  cleanup.add(async () => {
    if (madeDir) {
      try {
        rmdirSync(dir);
      } catch {
        // not empty: something else put a file there, which is not this run's to remove
      }
    }
    await release();
  });
  return null;
}
