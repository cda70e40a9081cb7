import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { TunnelNames } from '../../daemon/bridges/tunnels/tunnel-names.js';
import { Cleanup } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

function stateDir(): string {
  const dir = mkdtempSync('/tmp/sbx-names-');
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  return path.join(dir, 'state');
}

const ROOT = /^\/tmp\/sandboxd-[0-9a-f]{16}$/;

describe('TunnelNames: the VM roots', () => {
  it('chooses a random root per login once and keeps it in a 0600 file across daemons', async () => {
    const dir = stateDir();
    const names = new TunnelNames(dir);
    const core = await names.root('m\ncore\n127.0.0.1');
    const root = await names.root('m-root\nroot\n127.0.0.1');
    expect(core).toMatch(ROOT);
    expect(root).toMatch(ROOT);
    expect(root).not.toBe(core);
    expect(await names.root('m\ncore\n127.0.0.1')).toBe(core);
    expect(statSync(path.join(dir, 'tunnel-roots.json')).mode & 0o777).toBe(0o600);
    // The next daemon finds the same roots, where running containers mount their tunnel dirs.
    const next = new TunnelNames(dir);
    expect(await next.root('m\ncore\n127.0.0.1')).toBe(core);
    expect(await next.root('m-root\nroot\n127.0.0.1')).toBe(root);
  });

  it('two daemons with their own state dirs never share a root', async () => {
    expect(await new TunnelNames(stateDir()).root('m\ncore\nh')).not.toBe(await new TunnelNames(stateDir()).root('m\ncore\nh'));
  });

  it('concurrent tunnels of one login share the root chosen first', async () => {
    const names = new TunnelNames(stateDir());
    const roots = await Promise.all(Array.from({ length: 5 }, () => names.root('m\ncore\nh')));
    expect(new Set(roots).size).toBe(1);
  });

  it('replaces a taken root with a new one that is kept; a replacement already made stands', async () => {
    const dir = stateDir();
    const names = new TunnelNames(dir);
    const taken = await names.root('m\ncore\nh');
    const other = await names.root('n\ncore\nh');
    const [first, second] = await Promise.all([names.replaceRoot('m\ncore\nh', taken), names.replaceRoot('m\ncore\nh', taken)]);
    expect(first).toMatch(ROOT);
    expect(first).not.toBe(taken);
    expect(second).toBe(first);
    expect(await new TunnelNames(dir).root('m\ncore\nh')).toBe(first);
    expect(await new TunnelNames(dir).root('n\ncore\nh')).toBe(other);
  });

  it('a file not in its shape keeps nothing: new roots are chosen, never a name it gives', async () => {
    const dir = stateDir();
    const names = new TunnelNames(dir);
    await names.root('x');
    const file = path.join(dir, 'tunnel-roots.json');
    writeFileSync(file, JSON.stringify({ version: 1, roots: { 'm\ncore\nh': '../../etc' } }));
    const root = await new TunnelNames(dir).root('m\ncore\nh');
    expect(root).toMatch(ROOT);
    expect(readFileSync(file, 'utf8')).not.toContain('etc');
  });
});
