import { describe, expect, it } from 'vitest';
import { gapCheckedWatch, type WatchEdge } from '../../daemon/os/watch.js';

/**
 * Stands in for `fs.watch`: on a Mac, libuv replaces its one FSEventStream "since now" on every
 * watch started or stopped (libuv src/unix/fsevents.c, uv__fsevents_reschedule), so whoever relies
 * on the watches must look again after each change; on Linux each inotify watch is its own.
 */
function recordingEdge(): { edge: WatchEdge; events: string[] } {
  const events: string[] = [];
  const edge: WatchEdge = (dir) => {
    if (dir === '/gone') return null;
    events.push(`watch ${dir}`);
    return { close: () => events.push(`close ${dir}`) };
  };
  return { edge, events };
}

describe('gapCheckedWatch', () => {
  it('on macOS looks again after every watch started and every watch closed', () => {
    const { edge, events } = recordingEdge();
    const watch = gapCheckedWatch('darwin', edge, () => events.push('recheck'));
    const refs = watch('/sandbox/refs', () => undefined);
    const heads = watch('/sandbox/refs/heads', () => undefined);
    refs?.close();
    expect(watch('/gone', () => undefined)).toBeNull();
    heads?.close();
    expect(events).toEqual(['watch /sandbox/refs', 'recheck', 'watch /sandbox/refs/heads', 'recheck', 'close /sandbox/refs', 'recheck', 'recheck', 'close /sandbox/refs/heads', 'recheck']);
  });

  it('on Linux is the watch edge itself: nothing is rechecked', () => {
    const { edge, events } = recordingEdge();
    const watch = gapCheckedWatch('linux', edge, () => events.push('recheck'));
    expect(watch).toBe(edge);
    watch('/sandbox/refs', () => undefined)?.close();
    expect(events).toEqual(['watch /sandbox/refs', 'close /sandbox/refs']);
  });
});
