import { promises as fs } from 'node:fs';
import path from 'node:path';
import { HOME_GIT_FILES, type GitConfigFile } from './git.js';

/** Canonical paths of the home git files that exist; credentials are never in this list. */
export async function findHomeGitFiles(hostHome: string): Promise<GitConfigFile[]> {
  const found: GitConfigFile[] = [];
  for (const name of HOME_GIT_FILES) {
    const file = path.join(hostHome, name);
    try {
      const source = await fs.realpath(file);
      if ((await fs.stat(source)).isFile()) found.push({ path: file, source });
    } catch {
      // absent files are skipped, never created
    }
  }
  return found;
}
