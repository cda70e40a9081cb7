import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { SandboxdError } from '../../shared/errors.js';
import { clip } from '../os/text.js';
import { packageFile } from '../os/package-files.js';
import type { RunSubprocess } from '../os/subprocess.js';

/** Built by daemon/bridges/relay/build.sh into the package's dist/relay. */
const RELAY_DIR = packageFile('dist', 'relay');
export const RELAY_BINARY_IN_IMAGE = '/sandboxd-relay';
const IMPORT_TIMEOUT_MS = 60_000;

/** `docker info` Architecture (x86_64, aarch64, or Go's names) as the relay binaries are named. */
export function relayArch(architecture: string): 'amd64' | 'arm64' | null {
  if (architecture === 'x86_64' || architecture === 'amd64') return 'amd64';
  if (architecture === 'aarch64' || architecture === 'arm64') return 'arm64';
  return null;
}

export function relayBinaryPath(arch: 'amd64' | 'arm64', dir = RELAY_DIR): string {
  return path.join(dir, `sandboxd-relay-linux-${arch}`);
}

/** A ustar archive holding one executable file at the root: all the relay image contains. */
export function singleFileTar(name: string, content: Buffer, mtimeSeconds = 0): Buffer {
  const header = Buffer.alloc(512);
  const octal = (value: number, length: number): string => `${value.toString(8).padStart(length - 1, '0')}\0`;
  header.write(name, 0, 100, 'utf8');
  header.write(octal(0o755, 8), 100);
  header.write(octal(0, 8), 108);
  header.write(octal(0, 8), 116);
  header.write(octal(content.length, 12), 124);
  header.write(octal(mtimeSeconds, 12), 136);
  header.write('        ', 148);
  header.write('0', 156);
  header.write('ustar\u000000', 257);
  let sum = 0;
  for (const byte of header) sum += byte;
  header.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148);
  const padding = Buffer.alloc((512 - (content.length % 512)) % 512);
  return Buffer.concat([header, content, padding, Buffer.alloc(1024)]);
}

export interface RelayImageDeps {
  run: RunSubprocess;
  docker: string;
  env: Record<string, string>;
  /** Where the archive is written for `docker import` (daemon-owned). */
  workDir: string;
  binaryDir?: string;
}

/**
 * sandboxd's own image, `sandboxd-relay:<digest>`, made from the static relay binary with
 * `docker import` (the CLI uploads the file; no registry, no pull, nothing from the user's image).
 * The tag names the binary's digest, so an image that is present is the right one.
 */
export async function ensureRelayImage(architecture: string, deps: RelayImageDeps): Promise<string> {
  const arch = relayArch(architecture);
  const binary = arch === null ? null : await fs.readFile(relayBinaryPath(arch, deps.binaryDir)).catch(() => null);
  if (binary === null) {
    throw new SandboxdError('SSH_BRIDGE_UNSUPPORTED', `this sandboxd has no agent relay built for the engine's architecture (${architecture || 'unknown'}), which a non-root container user needs`, {
      remedy: 'Run the container as root (its built-in agent socket is root-only), install a sandboxd built on Linux with the cross compiler (`npm pack` there carries the amd64 and arm64 relays; a Mac builds none), or pass --ssh-agent off.',
    });
  }
  const tag = `sandboxd-relay:${createHash('sha256').update(binary).digest('hex').slice(0, 16)}`;
  const present = await deps.run(deps.docker, ['image', 'inspect', '--format', '{{.Id}}', tag], { env: deps.env, timeoutMs: 10_000 });
  if (present.exitCode === 0) return tag;
  const archive = path.join(deps.workDir, `relay-${process.pid}-${Date.now()}.tar`);
  await fs.mkdir(deps.workDir, { recursive: true, mode: 0o700 });
  await fs.writeFile(archive, singleFileTar(RELAY_BINARY_IN_IMAGE.slice(1), binary), { mode: 0o600 });
  try {
    const imported = await deps.run(deps.docker, ['import', '--message', 'sandboxd agent relay', archive, tag], { env: deps.env, timeoutMs: IMPORT_TIMEOUT_MS });
    if (imported.exitCode !== 0) {
      throw new SandboxdError('RELAY_CONTAINER_FAILED', `\`docker import\` of the agent relay image failed: ${clip(imported.stderr.trim() || `exit ${String(imported.exitCode)}`)}`);
    }
  } finally {
    await fs.rm(archive, { force: true });
  }
  return tag;
}
