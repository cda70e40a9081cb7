import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { relayArch, relayBinaryPath } from '../../daemon/bridges/relay-image.js';
import { Cleanup, ROOT, startAgent, waitFor } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

/** The lab has both compilers (native and cross); a machine without the cross one skips, CI never. */
const crossCompiler = spawnSync('sh', ['-c', 'command -v aarch64-linux-gnu-gcc || command -v x86_64-linux-gnu-gcc'], { stdio: 'ignore' }).status === 0;
const ELF_MAGIC = Buffer.from([0x7f, 0x45, 0x4c, 0x46]);
const PT_INTERP = 3;

/** The ELF64 program headers' types: a PT_INTERP names a dynamic loader, which the VM's image lacks. */
function programHeaderTypes(binary: Buffer): number[] {
  const offset = Number(binary.readBigUInt64LE(0x20));
  const size = binary.readUInt16LE(0x36);
  return Array.from({ length: binary.readUInt16LE(0x38) }, (_, index) => binary.readUInt32LE(offset + index * size));
}

describe.skipIf(!crossCompiler && process.env.CI === undefined)('the agent relay the build ships (it runs in the engine\'s VM, not here)', () => {
  it.each([
    ['amd64', 0x3e],
    ['arm64', 0xb7],
  ] as const)('%s: a static 64-bit Linux executable for that machine', (arch, machine) => {
    const binary = readFileSync(relayBinaryPath(arch, path.join(ROOT, 'dist/relay')));
    expect(binary.subarray(0, 4)).toEqual(ELF_MAGIC);
    expect(binary[4]).toBe(2);
    expect(binary.readUInt16LE(0x12)).toBe(machine);
    expect(programHeaderTypes(binary)).not.toContain(PT_INTERP);
  });
});

/** The relay for this machine, run here as it runs in a VM (it is static, and reads nothing else). */
const native = relayArch(process.arch === 'x64' ? 'x86_64' : process.arch);
const nativeBinary = native === null ? null : relayBinaryPath(native, path.join(ROOT, 'dist/relay'));

/** A connection that asks for identities: `served` once an agent answered, `refused` when closed without one. */
function ask(socket: string): Promise<{ outcome: 'served' | 'refused'; client: net.Socket }> {
  return new Promise((resolve) => {
    const client = net.connect(socket, () => client.write(Buffer.from([0, 0, 0, 1, 11])));
    cleanup.add(() => client.destroy());
    client.once('data', () => {
      resolve({ outcome: 'served', client });
    });
    client.on('close', () => {
      resolve({ outcome: 'refused', client });
    });
    client.on('error', () => undefined);
  });
}

describe.skipIf((nativeBinary === null || !existsSync(nativeBinary)) && process.env.CI === undefined)('the relay\'s bounds, status and socket check (the binary for this machine, run here)', () => {
  async function relay(max: number, rate: number, mode: '600' | '666') {
    const dir = mkdtempSync('/tmp/sbx-relay-bin-');
    cleanup.add(() => {
      rmSync(dir, { recursive: true, force: true });
    });
    const agent = await startAgent(dir, cleanup);
    const listen = path.join(dir, 'listen.sock');
    const child = spawn(nativeBinary ?? '', ['serve', agent.socket, listen, String(max), String(rate), mode], { stdio: ['ignore', 'pipe', 'pipe'] });
    cleanup.add(() => child.kill('SIGKILL'));
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    await waitFor(() => stdout.includes('sandboxd-relay ready'), 'the relay to be ready', 10_000);
    return { listen, stdout: () => stdout, stderr: () => stderr };
  }

  it('serves at most MAX at once and closes the rest at once; says what it refused on its status line; its socket has MODE', async () => {
    const { listen, stdout } = await relay(2, 0, '666');
    expect(statSync(listen).mode & 0o777).toBe(0o666);
    const outcomes = [];
    for (let i = 0; i < 6; i += 1) outcomes.push((await ask(listen)).outcome);
    expect(outcomes).toEqual(['served', 'served', 'refused', 'refused', 'refused', 'refused']);
    await waitFor(() => /sandboxd-relay status open=2 refused=4 rebound=0\n/.test(stdout()), 'the status line', 10_000, 100);
  });

  it('accepts RATE new connections a second, one second\'s worth at once', async () => {
    const { listen } = await relay(100, 3, '600');
    expect(statSync(listen).mode & 0o777).toBe(0o600);
    const outcomes = [];
    for (let i = 0; i < 5; i += 1) {
      const { outcome, client } = await ask(listen);
      outcomes.push(outcome);
      client.destroy();
    }
    expect(outcomes).toEqual(['served', 'served', 'served', 'refused', 'refused']);
  });

  it('binds its socket again when it is replaced, says so and counts it', async () => {
    const { listen, stdout, stderr } = await relay(4, 0, '600');
    renameSync(listen, `${listen}.moved`);
    await waitFor(() => stderr().includes(`${listen} was not the socket it bound; bound it again`), 'the relay to notice', 10_000, 100);
    expect((await ask(listen)).outcome).toBe('served');
    await waitFor(() => /rebound=1\n/.test(stdout()), 'the status line', 10_000, 100);
  });
});
