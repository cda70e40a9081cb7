import { watch } from 'node:fs';

export interface Watcher {
  close(): void;
}

/**
 * Calls `onChange` on any change in `dir` (an entry created, written, renamed or removed) and when
 * the watch itself fails; null when `dir` cannot be watched (gone, or the system is out of watches).
 */
export function watchDirectory(dir: string, onChange: () => void): Watcher | null {
  try {
    const watcher = watch(dir, { persistent: false }, () => {
      onChange();
    });
    watcher.on('error', () => {
      watcher.close();
      onChange();
    });
    return watcher;
  } catch {
    return null;
  }
}
