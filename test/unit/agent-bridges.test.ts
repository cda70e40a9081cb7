import { describe, expect, it } from 'vitest';
import { selinuxAccess, vmRootFor } from '../../daemon/agent-bridges.js';

describe('selinuxAccess (what `getenforce` in the VM asks of the plan)', () => {
  it('disables labels for the container only where SELinux enforces, and says why', () => {
    expect(selinuxAccess('Enforcing', 'podman-machine-default')).toEqual({
      flags: ['--security-opt', 'label=disable'],
      warnings: ['SELinux is enforcing in the VM of connection podman-machine-default; the plan adds --security-opt label=disable so the container can reach the agent socket'],
    });
    for (const mode of ['Permissive', 'Disabled', 'none', null]) expect(selinuxAccess(mode, 'm')).toEqual({ flags: [], warnings: [] });
  });
});

describe('vmRootFor', () => {
  it('is stable per user and state dir, and differs between them', () => {
    expect(vmRootFor(501, '/a')).toBe(vmRootFor(501, '/a'));
    expect(vmRootFor(501, '/a')).toMatch(/^\/tmp\/sandboxd-[0-9a-f]{10}$/);
    expect(vmRootFor(502, '/a')).not.toBe(vmRootFor(501, '/a'));
    expect(vmRootFor(501, '/b')).not.toBe(vmRootFor(501, '/a'));
    // A machine's `core` and `root` connections share a port but never a VM directory.
    expect(vmRootFor(501, '/a', 'core')).not.toBe(vmRootFor(501, '/a', 'root'));
  });
});
