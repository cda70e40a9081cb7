import { watch } from 'node:fs';
import type { Platform } from '../../shared/paths.js';

export interface Watcher {
  close(): void;
}

/** Starts a watch of one directory: `watchDirectory`, or a stand-in in tests. */
export type WatchEdge = (dir: string, onChange: () => void) => Watcher | null;

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

/**
 * `watchDir` with `recheck` called after every watch started or closed where that can lose events.
 * macOS: libuv keeps one FSEventStream per loop and, on every watch started or stopped, replaces it
 * with a new one that reports only what happens from then on (src/unix/fsevents.c,
 * uv__fsevents_reschedule), so a write in between reaches no watch of the process, and the new
 * stream starts later, on libuv's own thread. Linux: each inotify watch is its own, nothing is lost.
 */
export function gapCheckedWatch(platform: Platform, watchDir: WatchEdge, recheck: () => void): WatchEdge {
  if (platform !== 'darwin') return watchDir;
  return (dir, onChange) => {
    const watcher = watchDir(dir, onChange);
    recheck();
    if (watcher === null) return null;
    return {
      close: () => {
        watcher.close();
        recheck();
      },
    };
  };
}
