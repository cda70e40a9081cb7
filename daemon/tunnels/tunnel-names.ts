import { createHmac, randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { writeFileAtomic } from '../atomic-file.js';

const SECRET_FILE = 'tunnel-secret';
const SECRET = /^[0-9a-f]{64}$/;

/**
 * Names tunnel directories in the VM (DESIGN §6: the VM-side path is a capability). A name is an
 * HMAC of the tunnel's key under a secret kept in the 0700 state dir: stable across daemon
 * restarts (a restarted daemon finds the directory running containers mount), unguessable to
 * anyone who knows the connection and agent path but not the secret.
 */
export class TunnelNames {
  private secret: Promise<string> | null = null;

  constructor(private readonly stateDir: string) {}

  async dirName(key: string): Promise<string> {
    this.secret ??= this.load();
    const secret = await this.secret.catch((error: unknown) => {
      this.secret = null;
      throw error;
    });
    return createHmac('sha256', secret).update(key).digest('hex').slice(0, 32);
  }

  private async load(): Promise<string> {
    const file = path.join(this.stateDir, SECRET_FILE);
    const existing = await fs.readFile(file, 'utf8').catch(() => '');
    if (SECRET.test(existing.trim())) return existing.trim();
    const secret = randomBytes(32).toString('hex');
    await fs.mkdir(this.stateDir, { recursive: true, mode: 0o700 });
    await writeFileAtomic(file, `${secret}\n`, 0o600);
    return secret;
  }
}
