import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { createProcessProbe, pidExists, PS_ENV, type PsRunner, isStoppedState } from '../../daemon/os/process-identity.js';
import { Cleanup, waitFor, ROOT } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

/** A fake `ps` standing in for macOS's: records every call and answers with canned lines. */
function fakePs(stdout: string, exitCode: number | null = 0): PsRunner & { calls: { args: readonly string[]; env: Readonly<Record<string, string>> }[] } {
  const calls: { args: readonly string[]; env: Readonly<Record<string, string>> }[] = [];
  const run: PsRunner = (args, env) => {
    calls.push({ args, env });
    return Promise.resolve({ exitCode, stdout });
  };
  return Object.assign(run, { calls });
}

/** `sh` forks `sleep 0` and execs into `sleep 30`, which never reaps it: a zombie until killed. */
async function zombie(): Promise<number> {
  const parent = spawn('sh', ['-c', 'sleep 0 & echo $!; exec sleep 30'], { stdio: ['ignore', 'pipe', 'ignore'] });
  cleanup.add(() => parent.kill('SIGKILL'));
  const pid = Number(
    await new Promise<string>((resolve) => {
      parent.stdout.once('data', (chunk: Buffer) => {
        resolve(chunk.toString());
      });
    }),
  );
  await waitFor(() => readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.startsWith('Z'), `pid ${pid} to become a zombie`);
  return pid;
}

describe('process probe on macOS (a fake ps stands in for macOS ps)', () => {
  it('looks up every pid with one ps call, in the C locale and UTC whatever the caller uses', async () => {
    const ps = fakePs(['  101 Ss   Tue Mar  5 10:11:12 2024', '  202 S+   Wed Mar  6 01:02:03 2024', ''].join('\n'));
    const probe = createProcessProbe('darwin', ps);
    const times = await probe.startTimes([101, 202, 303, 101]);
    expect(ps.calls).toEqual([{ args: ['-o', 'pid=', '-o', 'stat=', '-o', 'lstart=', '-p', '101,202,303'], env: { LC_ALL: 'C', TZ: 'UTC' } }]);
    expect([...times]).toEqual([
      [101, 'Tue Mar 5 10:11:12 2024'],
      [202, 'Wed Mar 6 01:02:03 2024'],
    ]);
    // A read costs a subprocess here: an acquire does not wait for one (the sweep's ps reads it).
    expect(probe.cheapStartTime).toBe(false);
  });

  it('reads the start times asked for together with one ps: a daemon restarted under many clients spawns one or two, not one each', async () => {
    const lines = Array.from({ length: 50 }, (_, index) => `  ${1000 + index} Ss   Tue Mar  5 10:11:12 2024`);
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const calls: string[] = [];
    // A ps that takes a while: what is asked for while it runs waits for the next one.
    const slowPs: PsRunner = async (args) => {
      calls.push(args.at(-1) ?? '');
      await gate;
      return { exitCode: 0, stdout: lines.join('\n') };
    };
    const probe = createProcessProbe('darwin', slowPs);
    const first = Promise.all(Array.from({ length: 25 }, (_, index) => probe.startTime(1000 + index)));
    await new Promise((resolve) => setTimeout(resolve, 10));
    const second = Promise.all(Array.from({ length: 25 }, (_, index) => probe.startTime(1025 + index)));
    const sweep = probe.startTimes([1000, 1049]);
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(calls).toHaveLength(1);
    release();
    const answers = [...(await first), ...(await second)];
    expect(answers).toEqual(Array.from({ length: 50 }, () => 'Tue Mar 5 10:11:12 2024'));
    expect([...(await sweep).keys()]).toEqual(expect.arrayContaining([1000, 1049]));
    expect(calls).toEqual([
      Array.from({ length: 25 }, (_, index) => 1000 + index).join(','),
      [...Array.from({ length: 25 }, (_, index) => 1025 + index), 1000].join(','),
    ]);
  });

  it('treats a zombie as gone', async () => {
    const probe = createProcessProbe('darwin', fakePs('  101 Z    Tue Mar  5 10:11:12 2024\n  102 Z+   Tue Mar  5 10:11:12 2024\n'));
    expect(await probe.startTimes([101, 102])).toEqual(new Map());
    expect(await probe.isSame(101, null)).toBe(false);
  });

  it('spawns nothing for an empty sweep', async () => {
    const ps = fakePs('');
    expect(await createProcessProbe('darwin', ps).startTimes([])).toEqual(new Map());
    expect(ps.calls).toEqual([]);
  });

  it('compares start times: same, reused pid, and gone', async () => {
    const probe = createProcessProbe('darwin', fakePs('  101 Ss   Tue Mar  5 10:11:12 2024\n', 0));
    expect(await probe.isSame(101, 'Tue Mar 5 10:11:12 2024')).toBe(true);
    expect(await probe.isSame(101, 'Mon Mar 4 09:00:00 2024')).toBe(false);
    expect(await probe.isSame(101, null)).toBe(true);
    expect(await createProcessProbe('darwin', fakePs('', 1)).isSame(101, null)).toBe(false);
  });

  it('when ps cannot run, keeps the pids that exist instead of declaring every client dead', async () => {
    const probe = createProcessProbe('darwin', fakePs('', null));
    const times = await probe.startTimes([process.pid, 2 ** 22 + 1]);
    expect([...times]).toEqual([[process.pid, null]]);
  });

  it('reads the same identity whatever TZ and LANG the daemon runs under (real procps ps)', async () => {
    const underCallerEnv = (callerEnv: Record<string, string>): PsRunner => async (args, env) => {
      const result = await execa('ps', args, { env: { ...callerEnv, ...env }, extendEnv: false, reject: false });
      return { exitCode: result.exitCode ?? null, stdout: result.stdout };
    };
    const auckland = { TZ: 'Pacific/Auckland', LANG: 'de_DE.UTF-8', PATH: process.env.PATH ?? '' };
    const newYork = { TZ: 'America/New_York', LANG: 'C', PATH: process.env.PATH ?? '' };
    const first = await createProcessProbe('darwin', underCallerEnv(auckland)).startTime(process.pid);
    const second = await createProcessProbe('darwin', underCallerEnv(newYork)).startTime(process.pid);
    expect(first).not.toBeNull();
    expect(second).toBe(first);
    // Without the forced environment the two would disagree: this is what the probe protects against.
    const raw = async (env: Record<string, string>) => (await execa('ps', ['-o', 'lstart=', '-p', String(process.pid)], { env, extendEnv: false })).stdout;
    expect(await raw(auckland)).not.toBe(await raw(newYork));
    expect(PS_ENV).toEqual({ LC_ALL: 'C', TZ: 'UTC' });
  });
});

describe('process probe on Linux', () => {
  it('reads this process from /proc and agrees with itself', async () => {
    const probe = createProcessProbe('linux');
    const start = await probe.startTime(process.pid);
    expect(start).toMatch(/^\d+$/);
    expect(await probe.isSame(process.pid, start)).toBe(true);
    expect(await probe.isSame(process.pid, '1')).toBe(false);
    expect(probe.cheapStartTime).toBe(true);
  });

  it('treats a zombie as gone although kill(pid, 0) still succeeds on it', async () => {
    const pid = await zombie();
    expect(pidExists(pid)).toBe(true);
    const probe = createProcessProbe('linux');
    expect(await probe.isSame(pid, null)).toBe(false);
    expect(await probe.startTime(pid)).toBeNull();
    const times = await probe.startTimes([pid, process.pid]);
    expect([...times.keys()]).toEqual([process.pid]);
  });
});

describe('stopped clients (Ctrl-Z)', () => {
  it('Linux: a real process stopped with SIGSTOP is live and stopped; after SIGCONT it is not stopped', async () => {
    const child = spawn('sleep', ['30'], { stdio: 'ignore' });
    cleanup.add(() => child.kill('SIGKILL'));
    const pid = child.pid ?? 0;
    const probe = createProcessProbe('linux');
    process.kill(pid, 'SIGSTOP');
    await waitFor(() => readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.startsWith('T'), `pid ${pid} to stop`);
    const stopped = await probe.startTimes([pid]);
    expect(stopped.has(pid)).toBe(true);
    expect(stopped.stopped?.has(pid)).toBe(true);
    process.kill(pid, 'SIGCONT');
    await waitFor(() => !readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.startsWith('T'), `pid ${pid} to resume`);
    expect((await probe.startTimes([pid])).stopped?.has(pid)).toBe(false);
  });

  it('macOS: the state letter T is stopped; the STAT values of a real macOS ps are not', async () => {
    // The real capture's STAT column (ps-o-pid-stat.macos.txt); no real capture of a stopped one exists.
    const states = readFileSync(path.join(ROOT, 'test/fixtures/mac/ps-o-pid-stat.macos.txt'), 'utf8').split('\n').slice(1).map((line) => line.trim().split(/\s+/)[1] ?? '').filter((state) => state !== '');
    expect(states).toEqual(['Ss', 'Ss', 'Ss', 'Ss', 'Ss']);
    for (const state of states) expect(isStoppedState(state)).toBe(false);
    expect(isStoppedState('T')).toBe(true);
    expect(isStoppedState('T+')).toBe(true);
    const times = await createProcessProbe('darwin', fakePs(['  101 T+   Tue Mar  5 10:11:12 2024', '  202 Ss   Wed Mar  6 01:02:03 2024', ''].join('\n'))).startTimes([101, 202]);
    expect([...times.keys()]).toEqual([101, 202]);
    expect([...(times.stopped ?? [])]).toEqual([101]);
  });
});
