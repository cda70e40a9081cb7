import { createHmac, randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import * as z from 'zod/mini';
import { writeFileAtomic } from '../../os/files.js';
import { readStateFile } from '../../os/state-file.js';

const SECRET_FILE = 'tunnel-secret';
const ROOTS_FILE = 'tunnel-roots.json';
const SECRET = /^[0-9a-f]{64}$/;

/** Tunnel roots in the VM are `/tmp/sandboxd-<16 hex>`: random, and chosen again when taken. */
export const VM_ROOT_PREFIX = '/tmp/sandboxd-';
const ROOT_NAME = /^[0-9a-f]{16}$/;

const RootsFile = z.strictObject({
  version: z.literal(1),
  roots: z.record(z.string().check(z.maxLength(4096)), z.string().check(z.regex(ROOT_NAME))),
});

/**
 * Names what tunnels own in the VM (DESIGN §6: the VM-side path is a capability), from state kept
 * in the 0700 state dir so a restarted daemon finds the directories running containers mount.
 *
 * A tunnel directory's name is an HMAC of the tunnel's key under a per-user secret: unguessable to
 * anyone who knows the connection and agent path but not the secret. The root above it sits in
 * the VM's shared /tmp, where any user can list it once it exists and create it first when it
 * does not (after a reboot, or once tmpfiles aged it out): its name is random, chosen before
 * anyone could see it, and chosen again when the VM says someone else holds it.
 */
export class TunnelNames {
  private secret: Promise<string> | null = null;
  private roots: Promise<Map<string, string>> | null = null;
  private writing: Promise<void> = Promise.resolve();

  constructor(private readonly stateDir: string) {}

  async dirName(key: string): Promise<string> {
    this.secret ??= this.loadSecret();
    const secret = await this.secret.catch((error: unknown) => {
      this.secret = null;
      throw error;
    });
    return createHmac('sha256', secret).update(key).digest('hex').slice(0, 32);
  }

  /** The root for a login (connection, remote user, host): the one kept, or a new one kept from now on. */
  async root(login: string): Promise<string> {
    const roots = await this.loadRoots();
    const kept = roots.get(login);
    return kept === undefined ? this.choose(roots, login) : VM_ROOT_PREFIX + kept;
  }

  /**
   * A new root for a login whose root `taken` is not the remote user's (another user created it
   * first, or planted a symlink there). Another tunnel of the login may have replaced it already:
   * then that choice stands.
   */
  async replaceRoot(login: string, taken: string): Promise<string> {
    const roots = await this.loadRoots();
    const kept = roots.get(login);
    return kept === undefined || VM_ROOT_PREFIX + kept === taken ? this.choose(roots, login) : VM_ROOT_PREFIX + kept;
  }

  /** Chosen and recorded before anything awaits, so concurrent tunnels of a login share it. */
  private async choose(roots: Map<string, string>, login: string): Promise<string> {
    const name = randomBytes(8).toString('hex');
    roots.set(login, name);
    const body = `${JSON.stringify({ version: 1, roots: Object.fromEntries(roots) }, null, 2)}\n`;
    const file = path.join(this.stateDir, ROOTS_FILE);
    const written = this.writing.then(async () => {
      await fs.mkdir(this.stateDir, { recursive: true, mode: 0o700 });
      await writeFileAtomic(file, body, 0o600);
    });
    this.writing = written.catch(() => undefined);
    await written;
    return VM_ROOT_PREFIX + name;
  }

  private loadRoots(): Promise<Map<string, string>> {
    this.roots ??= readRoots(path.join(this.stateDir, ROOTS_FILE));
    return this.roots;
  }

  private async loadSecret(): Promise<string> {
    const file = path.join(this.stateDir, SECRET_FILE);
    const existing = (await readStateFile(file, { moveAside: true, maxBytes: 4096 }).catch(() => null)) ?? '';
    if (SECRET.test(existing.trim())) return existing.trim();
    const secret = randomBytes(32).toString('hex');
    await fs.mkdir(this.stateDir, { recursive: true, mode: 0o700 });
    await writeFileAtomic(file, `${secret}\n`, 0o600);
    return secret;
  }
}

/** What the file keeps; one that is missing or not in its shape keeps nothing (names are chosen anew). */
async function readRoots(file: string): Promise<Map<string, string>> {
  const text = await readStateFile(file, { moveAside: true }).catch(() => null);
  if (text === null) return new Map();
  try {
    const parsed = RootsFile.safeParse(JSON.parse(text));
    return new Map(parsed.success ? Object.entries(parsed.data.roots) : []);
  } catch {
    return new Map();
  }
}
