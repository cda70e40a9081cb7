import type { execFile } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { SandboxdError } from '../../shared/errors.js';
import { Limiter } from '../../daemon/os/subprocess-limiter.js';
import { createSubprocessRunner, type SubprocessEvent } from '../../daemon/os/subprocess.js';

const ENV = { PATH: '/usr/bin:/bin' };

describe('Limiter', () => {
  it('runs at most `limit` tasks at once and the rest in arrival order', async () => {
    const limiter = new Limiter(2);
    const started: number[] = [];
    const finish: (() => void)[] = [];
    const tasks = [0, 1, 2, 3].map((n) =>
      limiter.run(
        () =>
          new Promise<number>((resolve) => {
            started.push(n);
            finish.push(() => {
              resolve(n);
            });
          }),
      ),
    );
    await Promise.resolve();
    expect(started).toEqual([0, 1]);
    expect(limiter.queued).toBe(2);
    finish[0]?.();
    await tasks[0];
    await new Promise((resolve) => setImmediate(resolve));
    expect(started).toEqual([0, 1, 2]);
    for (const done of finish.slice(1)) done();
    await new Promise((resolve) => setImmediate(resolve));
    finish[3]?.();
    expect(await Promise.all(tasks)).toEqual([0, 1, 2, 3]);
    expect(limiter.running).toBe(0);
  });
});

describe('runSubprocess', () => {
  const run = createSubprocessRunner({ limiter: new Limiter(2) });

  it('reports exit codes and output, without the daemon environment', async () => {
    const result = await run('/bin/sh', ['-c', 'echo "$PATH ${HOME:-nohome}"; echo err >&2; exit 3'], { env: ENV, timeoutMs: 5_000 });
    expect(result).toEqual({ exitCode: 3, stdout: '/usr/bin:/bin nohome', stderr: 'err' });
  });

  it('tells its own observer of each command once it ended, and no other runner\'s', async () => {
    const heard: SubprocessEvent[] = [];
    const observed = createSubprocessRunner({ observe: (event) => heard.push(event) });
    await observed('/bin/sh', ['-c', 'exit 4'], { env: ENV, timeoutMs: 5_000 });
    await run('/bin/true', [], { env: ENV, timeoutMs: 5_000 });
    expect(heard).toEqual([{ file: '/bin/sh', args: ['-c', 'exit 4'], exitCode: 4, ms: expect.any(Number) as unknown }]);
  });

  it('kills a command that ignores its timeout\'s SIGTERM, and answers without waiting for it', async () => {
    // What podman waiting on a lock does: the signal is put off. Without the kill this runs 120 s.
    const result = await run('/bin/sh', ['-c', 'trap "" TERM; exec sleep 120'], { env: ENV, timeoutMs: 200 });
    expect(result).toMatchObject({ exitCode: null, stdout: '' });
    expect(result.stderr).toMatch(/^sh was still running 2000 ms after its 200 ms timeout, and was killed$/);
  });

  it('names a client cwd that is not a directory', async () => {
    for (const cwd of ['/dev/null', '/nonexistent-sandboxd-cwd']) {
      await expect(run('/bin/true', [], { env: ENV, clientCwd: cwd, timeoutMs: 5_000 })).rejects.toMatchObject({
        code: 'BAD_REQUEST',
        message: `the client's cwd ${cwd} is not a directory`,
      });
    }
  });

  it('names a variable whose value holds a NUL byte', async () => {
    await expect(run('/bin/true', [], { env: { ...ENV, XDG_CONFIG_HOME: 'a\0b' }, timeoutMs: 5_000 })).rejects.toMatchObject({
      code: 'BAD_REQUEST',
      message: expect.stringContaining('XDG_CONFIG_HOME') as string,
    });
  });

  it('turns running out of fds or processes into DAEMON_BUSY', async () => {
    for (const code of ['EMFILE', 'ENFILE', 'EAGAIN']) {
      // Stands in for a spawn that fails as node reports it: through the callback, not a throw.
      const exhausted = ((_file: string, _args: string[], _options: unknown, callback: (error: Error, stdout: string, stderr: string) => void) => {
        setImmediate(() => {
          callback(Object.assign(new Error(`spawn /usr/bin/git ${code}`), { code, syscall: 'spawn /usr/bin/git' }), '', '');
        });
      }) as unknown as typeof execFile;
      const failed = await createSubprocessRunner({ limiter: new Limiter(1), exec: exhausted })('/usr/bin/git', ['status'], { env: ENV, timeoutMs: 5_000 }).catch((error: unknown) => error);
      expect(failed).toBeInstanceOf(SandboxdError);
      expect(failed).toMatchObject({ code: 'DAEMON_BUSY', message: `cannot start git: the daemon is out of resources (${code})` });
    }
  });

  it('reports a command that cannot start for another reason as a failed run', async () => {
    const result = await run('/nonexistent/podman', [], { env: ENV, timeoutMs: 5_000 });
    expect(result.exitCode).toBeNull();
    expect(result.stderr).toContain('ENOENT');
  });
});

describe('a detached command (a session of its own, as the host git for credentials runs)', () => {
  const run = createSubprocessRunner();

  it('reads its input, has no controlling terminal, and is answered like any other', async () => {
    const result = await run('sh', ['-c', 'cat; ( : < /dev/tty ) 2>/dev/null && echo tty; exit 3'], { env: ENV, timeoutMs: 10_000, input: 'hello\n', detached: true });
    expect(result).toEqual({ exitCode: 3, stdout: 'hello', stderr: '' });
  });

  it('is stopped at its timeout and at its output bound, answered with no exit code', async () => {
    const slow = await run('sh', ['-c', 'sleep 10'], { env: ENV, timeoutMs: 200, detached: true });
    expect(slow.exitCode).toBeNull();
    expect(slow.stderr).toContain('timed out');
    const loud = await run('sh', ['-c', 'while :; do echo xxxxxxxxxxxxxxxx; done'], { env: ENV, timeoutMs: 10_000, detached: true, maxOutputBytes: 1024 });
    expect(loud.exitCode).toBeNull();
    expect(loud.stderr).toContain('maxBuffer');
  });

  it('a program that is not there is no exit code either', async () => {
    const missing = await run('/nonexistent/git', [], { env: ENV, timeoutMs: 1000, detached: true });
    expect(missing.exitCode).toBeNull();
    expect(missing.stderr).toContain('ENOENT');
  });
});
