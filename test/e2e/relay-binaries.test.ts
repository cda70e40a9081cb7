import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { relayBinaryPath } from '../../daemon/bridges/relay-image.js';
import { ROOT } from '../helpers.js';

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
