import { promises as fs } from 'node:fs';
import path from 'node:path';
import { writeFileAtomic } from '../../os/files.js';
import { stableHash } from '../../os/text.js';

/**
 * Holds the generated GIT_CONFIG_GLOBAL files. Named by their content, so every session with the
 * same config and repository shares one file and nothing is rewritten under a running container.
 */
export class GeneratedConfigStore {
  private readonly written = new Set<string>();
  private cleared: Promise<void> | null = null;

  constructor(private readonly dir: string) {}

  async write(content: string): Promise<string> {
    const file = path.join(this.dir, `${stableHash(content, 20)}.gitconfig`);
    if (this.written.has(file)) return file;
    // What a previous daemon left is dropped once, before this daemon's first file.
    this.cleared ??= fs.rm(this.dir, { recursive: true, force: true }).then(() => fs.mkdir(this.dir, { recursive: true, mode: 0o700 })).then(() => undefined);
    await this.cleared;
    await writeFileAtomic(file, content, 0o644);
    // Readable by any container user; the umask may have narrowed the mode open() applied.
    await fs.chmod(file, 0o644);
    this.written.add(file);
    return file;
  }
}
