import { cpSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { ROOT, type Cleanup } from '../helpers.js';

export interface OlderRelease {
  /** Its `dist/bin/sandboxd.js`. */
  cli: string;
  /** Its client library, `dist/client/index.js`. */
  client: string;
}

/**
 * This repository's code as an earlier release that speaks `protocol`: a copy of the work tree
 * with the protocol constant changed, built with the same tools (its package's own CLI is what
 * its client auto-starts). The relay binaries are copied, not compiled again.
 */
export async function buildOlderRelease(protocol: number, cleanup: Cleanup): Promise<OlderRelease> {
  const dir = mkdtempSync('/tmp/sbx-older-');
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  const files = (await execa('git', ['ls-files', '--cached', '--others', '--exclude-standard', '-z'], { cwd: ROOT })).stdout.split('\0').filter((file) => file !== '');
  for (const file of files) {
    if (file === 'node_modules') continue;
    mkdirSync(path.join(dir, path.dirname(file)), { recursive: true });
    try {
      cpSync(path.join(ROOT, file), path.join(dir, file));
    } catch {
      // listed by git but deleted in the work tree
    }
  }
  symlinkSync(realpathSync(path.join(ROOT, 'node_modules')), path.join(dir, 'node_modules'));
  const protocolFile = path.join(dir, 'shared', 'protocol.ts');
  const source = readFileSync(protocolFile, 'utf8');
  const changed = source.replace(/export const PROTOCOL_VERSION = \d+;/, `export const PROTOCOL_VERSION = ${String(protocol)};`);
  if (changed === source) throw new Error('shared/protocol.ts no longer declares PROTOCOL_VERSION as the older build expects');
  writeFileSync(protocolFile, changed);
  await execa(path.join(dir, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.build.json'], { cwd: dir });
  await execa(process.execPath, ['scripts/bundle.js'], { cwd: dir });
  cpSync(path.join(ROOT, 'dist', 'relay'), path.join(dir, 'dist', 'relay'), { recursive: true });
  return { cli: path.join(dir, 'dist', 'bin', 'sandboxd.js'), client: path.join(dir, 'dist', 'client', 'index.js') };
}
