import { execFile, spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';

/** Signals a terminal sends to its whole foreground process group (Ctrl-C, Ctrl-\). */
const TERMINAL_SIGNALS: ReadonlySet<NodeJS.Signals> = new Set(['SIGINT', 'SIGQUIT']);
const LOOK_TIMEOUT_MS = 1_000;

/** This process's group and its terminal's foreground group (0 without a terminal). */
function groups(): Promise<{ pgrp: number; tpgid: number } | null> {
  if (process.platform === 'linux') {
    try {
      // Fields after the command name: state ppid pgrp session tty_nr tpgid …
      const stat = readFileSync('/proc/self/stat', 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return Promise.resolve(Number(fields[3]) === 0 ? null : { pgrp: Number(fields[2]), tpgid: Number(fields[5]) });
    } catch {
      return Promise.resolve(null);
    }
  }
  return new Promise((resolve) => {
    execFile('ps', ['-o', 'pgid=,tpgid=', '-p', String(process.pid)], { timeout: LOOK_TIMEOUT_MS }, (error, stdout) => {
      const [pgrp = NaN, tpgid = NaN] = stdout.trim().split(/\s+/).map(Number);
      resolve(error === null && Number.isInteger(pgrp) && tpgid > 0 ? { pgrp, tpgid } : null);
    });
  });
}

/** Whether the controlling terminal turns Ctrl-C into a signal now (`isig`): false in raw mode. */
function terminalSignals(): Promise<boolean> {
  let fd: number;
  try {
    fd = openSync('/dev/tty', 'r');
  } catch {
    return Promise.resolve(false);
  }
  return new Promise((resolve) => {
    const stty = spawn('stty', ['-a'], { stdio: [fd, 'pipe', 'ignore'], timeout: LOOK_TIMEOUT_MS });
    closeSync(fd);
    let out = '';
    stty.stdout?.on('data', (chunk: Buffer) => (out += chunk.toString()));
    stty.once('error', () => {
      resolve(false);
    });
    stty.once('close', (code) => {
      resolve(code === 0 && /(^|\s)isig(\s|$)/.test(out));
    });
  });
}

/**
 * Whether `signal` most likely came from the terminal to the whole foreground job, the engine
 * client included (it shares this process's group): a Ctrl-C while this process is in the
 * terminal's foreground group and the terminal is not in raw mode. Sending it again would give
 * the engine client (and through it the container) two. In raw mode (`run -it`) Ctrl-C is a byte
 * for the container, so a signal then was sent to this process alone. When unsure: false.
 */
export async function terminalSentToGroup(signal: NodeJS.Signals): Promise<boolean> {
  if (!TERMINAL_SIGNALS.has(signal)) return false;
  const seen = await groups();
  if (seen === null || seen.pgrp !== seen.tpgid) return false;
  return terminalSignals();
}
