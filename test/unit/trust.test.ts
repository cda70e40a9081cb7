import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { assertTrustedSocket } from '../../client/trust.js';
import { SandboxdError } from '../../shared/errors.js';
import { Cleanup } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

const ME = process.getuid?.() ?? 0;
/** Any uid other than ours; chown needs no account behind it. */
const OTHER = ME + 4321;

function base(): string {
  const dir = mkdtempSync('/tmp/sbx-trust-');
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

function runtimeDir(mode = 0o700): string {
  const dir = path.join(base(), 'rt');
  mkdirSync(dir);
  chmodSync(dir, mode);
  return dir;
}

async function refusal(socketPath: string): Promise<SandboxdError> {
  const error = await assertTrustedSocket(socketPath, ME).catch((caught: unknown) => caught);
  expect(error).toBeInstanceOf(SandboxdError);
  return error as SandboxdError;
}

describe('assertTrustedSocket (DESIGN §3: checked before every connect)', () => {
  it('accepts a 0700 directory of ours, with or without our socket in it', async () => {
    const dir = runtimeDir();
    const socket = path.join(dir, 'sandboxd.sock');
    await expect(assertTrustedSocket(socket, ME)).resolves.toBeUndefined();
    writeFileSync(socket, '');
    await expect(assertTrustedSocket(socket, ME)).resolves.toBeUndefined();
  });

  it('reports a missing directory as no daemon, without creating anything', async () => {
    const socket = path.join(base(), 'rt', 'sandboxd.sock');
    const error = await refusal(socket);
    expect(error.code).toBe('DAEMON_NOT_RUNNING');
    expect(error.message).toBe(`no daemon is listening on ${socket}`);
  });

  it('refuses a directory owned by another uid', async () => {
    const dir = runtimeDir();
    chownSync(dir, OTHER, OTHER);
    const error = await refusal(path.join(dir, 'sandboxd.sock'));
    expect(error.code).toBe('INSECURE_DIRECTORY');
    expect(error.message).toBe(`refusing to connect: ${dir} is owned by uid ${OTHER}, not by you (uid ${ME}); another user may be posing as sandboxd`);
    expect(error.remedy).toBe(`Remove ${dir} (it is not yours; ask an administrator if you cannot), or set SANDBOXD_RUNTIME_DIR to a directory of your own.`);
  });

  it('refuses a directory open to group or others', async () => {
    const dir = runtimeDir(0o750);
    const error = await refusal(path.join(dir, 'sandboxd.sock'));
    expect(error.code).toBe('INSECURE_DIRECTORY');
    expect(error.message).toBe(`refusing to connect: ${dir} has mode 0750; it must be at most 0700`);
    expect(error.remedy).toBe(`Run \`chmod 0700 ${dir}\`.`);
  });

  it('refuses a symlink in place of the directory, even to a directory of ours', async () => {
    const target = runtimeDir();
    const link = path.join(base(), 'rt');
    symlinkSync(target, link);
    const error = await refusal(path.join(link, 'sandboxd.sock'));
    expect(error.code).toBe('INSECURE_DIRECTORY');
    expect(error.message).toBe(`refusing to connect: ${link} is not a directory (a symlink or file is in the way)`);
    expect(error.remedy).toBe(`Remove ${link}, or set SANDBOXD_RUNTIME_DIR to a directory of your own.`);
  });

  it('refuses a socket owned by another uid in our own directory', async () => {
    const dir = runtimeDir();
    const socket = path.join(dir, 'sandboxd.sock');
    writeFileSync(socket, '');
    chownSync(socket, OTHER, OTHER);
    const error = await refusal(socket);
    expect(error.code).toBe('INSECURE_DIRECTORY');
    expect(error.message).toBe(`refusing to connect: ${socket} is owned by uid ${OTHER}, not by you (uid ${ME}); another user may be posing as sandboxd`);
    expect(error.remedy).toBe(`Remove ${socket}, or set SANDBOXD_RUNTIME_DIR to a directory of your own.`);
  });

  it('refuses a path the file system cannot be asked about (a NUL byte), as it refuses one it cannot reach', async () => {
    const socket = path.join(runtimeDir(), 'bad\0dir', 'sandboxd.sock');
    const error = await refusal(socket);
    expect(error.code).toBe('INSECURE_DIRECTORY');
    expect(error.message).toMatch(/^refusing to connect: cannot check .*bad\0dir: /);
    expect(error.remedy).toContain('or set SANDBOXD_RUNTIME_DIR to a directory of your own.');
  });
});
