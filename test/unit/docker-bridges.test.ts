import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { agentMismatchWarning } from '../../daemon/bridges/docker-bridges.js';
import { relayVolumeArgs } from '../../daemon/bridges/relay-containers.js';
import { sessionMountFlags, sessionRelayRunArgs } from '../../daemon/bridges/session-relays.js';
import { ensureRelayImage, relayArch, singleFileTar } from '../../daemon/bridges/relay-image.js';
import { listAgentKeys, parseIdentities } from '../../daemon/engines/agent-keys.js';
import type { RunSubprocess } from '../../daemon/os/subprocess.js';
import { Cleanup, startAgent } from '../helpers.js';

const cleanup = new Cleanup();
afterEach(() => cleanup.run());

describe('relay containers (least privilege: only the hub holds gid 0, no session does)', () => {
  it('a session\'s relay runs as its user with no group beyond its own, bounded per session, serving a 0600 socket in its own small tmpfs volume', () => {
    expect(relayVolumeArgs('v', 'o', 1000, 100, '0700')).toEqual([
      'volume', 'create', '--driver', 'local', '--opt', 'type=tmpfs', '--opt', 'device=tmpfs', '--opt', 'o=uid=1000,gid=100,mode=0700,size=64k,nr_inodes=16',
      '--label', 'sandboxd.owner=o', '--label', 'sandboxd.helper=relay', 'v',
    ]);
    const args = sessionRelayRunArgs({ name: 'r', hub: 'h', uid: 1000, gid: 100, image: 'sandboxd-relay:abc', owner: 'o' });
    expect(args.join(' ')).toBe(
      'run --detach --name r --label sandboxd.owner=o --label sandboxd.helper=relay --network none --cap-drop ALL --read-only --security-opt no-new-privileges ' +
        '--pids-limit 16 --memory 16m --pull never --user 1000:100 ' +
        '--mount type=volume,source=h,target=/hub,readonly --mount type=volume,source=r,target=/srv ' +
        '--entrypoint /sandboxd-relay sandboxd-relay:abc serve /hub/agent.sock /srv/agent.sock 8 20 600',
    );
    // The session mounts its own volume only: no group, no VM socket, no hub.
    expect(sessionMountFlags('r', '/run/sandboxd/ssh')).toEqual(['--mount', 'type=volume,source=r,target=/run/sandboxd/ssh,readonly']);
  });

  it('the relay image is one static file in a ustar archive that tar reads back', () => {
    const dir = mkdtempSync('/tmp/sbx-tar-');
    cleanup.add(() => {
      rmSync(dir, { recursive: true, force: true });
    });
    const archive = path.join(dir, 'a.tar');
    writeFileSync(archive, singleFileTar('sandboxd-relay', Buffer.from('#!binary\n')));
    expect(execFileSync('tar', ['-tvf', archive], { encoding: 'utf8' })).toMatch(/^-rwxr-xr-x 0\/0\s+9 .* sandboxd-relay\n$/);
    expect(execFileSync('tar', ['-xOf', archive, 'sandboxd-relay'], { encoding: 'utf8' })).toBe('#!binary\n');
  });

  it('an architecture without a relay binary is SSH_BRIDGE_UNSUPPORTED naming it, with the remedy', async () => {
    expect(relayArch('x86_64')).toBe('amd64');
    expect(relayArch('aarch64')).toBe('arm64');
    expect(relayArch('s390x')).toBeNull();
    const run: RunSubprocess = () => Promise.reject(new Error('docker must not run'));
    await expect(ensureRelayImage('s390x', { run, docker: 'docker', env: {}, workDir: '/nonexistent' })).rejects.toMatchObject({
      code: 'SSH_BRIDGE_UNSUPPORTED',
      message: 'this sandboxd has no agent relay built for the engine\'s architecture (s390x), which a non-root container user needs',
      remedy: 'Run the container as root (its built-in agent socket is root-only), install a sandboxd built on Linux with the cross compiler (`npm pack` there carries the amd64 and arm64 relays; a Mac builds none), or pass --ssh-agent off.',
    });
  });
});

describe('which agent Docker Desktop serves', () => {
  it('warns when the VM\'s agent lacks keys the session\'s agent holds, never when the session\'s has none', () => {
    expect(agentMismatchWarning('Docker Desktop', [], ['SHA256:a'])).toMatch(/^Docker Desktop serves the agent it saw when it started, not this shell's SSH_AUTH_SOCK: 1 of your 1 key\(s\) are missing in it \(it holds 0\)\./);
    expect(agentMismatchWarning('OrbStack', ['SHA256:a', 'SHA256:b'], ['SHA256:a'])).toBeNull();
    expect(agentMismatchWarning('OrbStack', ['SHA256:a'], [])).toBeNull();
    expect(agentMismatchWarning('OrbStack', ['SHA256:a'], null)).toBeNull();
  });

  it('reads the session agent\'s keys as ssh-add does (a real ssh-agent), with the fingerprints ssh-add -l prints', async () => {
    const dir = mkdtempSync('/tmp/sbx-keys-');
    cleanup.add(() => {
      rmSync(dir, { recursive: true, force: true });
    });
    const agent = await startAgent(dir, cleanup);
    expect(await listAgentKeys(agent.socket)).toEqual([agent.fingerprint]);
    const listing = execFileSync('ssh-add', ['-l'], { env: { SSH_AUTH_SOCK: agent.socket }, encoding: 'utf8' });
    expect(listing).toContain(agent.fingerprint);
    expect(await listAgentKeys(path.join(dir, 'missing.sock'))).toBeNull();
    expect(parseIdentities(Buffer.from([5]))).toBeNull();
  });
});
