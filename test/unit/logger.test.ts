import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createDaemon } from '../../daemon/composition/daemon.js';
import { DEFAULT_SETTINGS } from '../../daemon/composition/daemon-deps.js';
import { realEdges } from '../../daemon/composition/edges.js';
import { createLogger, rotateLog } from '../../daemon/os/logger.js';
import { resolvePaths } from '../../shared/paths.js';
import { PROTOCOL_VERSION } from '../../shared/protocol.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function tempDir(): string {
  const dir = mkdtempSync('/tmp/sbx-log-');
  dirs.push(dir);
  return dir;
}

describe('rotateLog', () => {
  it('moves a log past the limit aside, replacing the previous one, and leaves small logs alone', async () => {
    const dir = tempDir();
    const log = path.join(dir, 'sandboxd.log');
    expect(await rotateLog(log, 10)).toBe(false);
    writeFileSync(log, 'short');
    expect(await rotateLog(log, 10)).toBe(false);
    writeFileSync(`${log}.1`, 'oldest');
    writeFileSync(log, 'long enough to rotate');
    expect(await rotateLog(log, 10)).toBe(true);
    expect(existsSync(log)).toBe(false);
    expect(readFileSync(`${log}.1`, 'utf8')).toBe('long enough to rotate');
  });
});

describe('the running daemon log', () => {
  it('stays under its limit through thousands of rejected requests that echo a 4 KB cwd', async () => {
    const dir = tempDir();
    const logPath = path.join(dir, 'log', 'sandboxd.log');
    const limit = 64 * 1024;
    const paths = resolvePaths({ platform: 'linux', env: { SANDBOXD_RUNTIME_DIR: dir, SANDBOXD_STATE_DIR: dir, SANDBOXD_LOG_DIR: dir }, uid: 0, home: dir });
    const daemon = createDaemon({
      edges: realEdges(paths),
      platform: 'linux',
      paths,
      hostHome: dir,
      probe: { cheapStartTime: true, startTime: () => Promise.resolve('1'), isSame: () => Promise.resolve(true), startTimes: () => Promise.resolve(new Map()) },
      logger: createLogger({ kind: 'file', path: logPath, rotateBytes: limit }, 'info'),
      logPath,
      settings: DEFAULT_SETTINGS,
      uid: 0,
      identity: { pid: process.pid, startTime: null },
      strayAnswers: () => Promise.resolve(false),
      requestShutdown: () => undefined,
      onTunnelChild: () => undefined,
    });
    try {
      const cwd = `/${'x'.repeat(4000)}`;
      for (let i = 0; i < 2_000; i += 1) {
        const reply = await daemon.app.inject({ method: 'POST', url: '/v1/sessions', headers: { 'sandboxd-protocol': String(PROTOCOL_VERSION) }, payload: { engine: 'docker', client: { pid: process.pid, cwd }, sshAgent: 'off' } });
        expect(reply.statusCode).toBe(400);
      }
    } finally {
      await daemon.close();
    }
    // Each file is at most the limit plus one line; a line echoes at most a clipped cwd.
    expect(statSync(logPath).size).toBeLessThanOrEqual(limit + 1024);
    expect(statSync(`${logPath}.1`).size).toBeLessThanOrEqual(limit + 1024);
    const lines = readFileSync(logPath, 'utf8').trimEnd().split('\n');
    expect(lines.length).toBeGreaterThan(10);
    for (const line of lines) expect(line.length).toBeLessThan(1024);
    expect(lines.at(-1)).toContain('…');
  });
});
