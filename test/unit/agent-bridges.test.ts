import { describe, expect, it } from 'vitest';
import { selinuxAccess } from '../../daemon/composition/agent-bridges.js';

describe('selinuxAccess (what `getenforce` in the VM asks of the plan)', () => {
  it('disables labels for the container only where SELinux enforces, and says why', () => {
    expect(selinuxAccess('Enforcing', 'podman-machine-default')).toEqual({
      flags: ['--security-opt', 'label=disable'],
      warnings: ['SELinux is enforcing in the VM of connection podman-machine-default; the plan adds --security-opt label=disable so the container can reach the agent socket'],
    });
    for (const mode of ['Permissive', 'Disabled', 'none', null]) expect(selinuxAccess(mode, 'm')).toEqual({ flags: [], warnings: [] });
  });
});
