import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { contextMetaPath, resolveEndpoint } from '../../daemon/engines/docker-endpoint.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A ~/.docker as the docker CLI writes it: config.json and contexts/meta/<sha256>/meta.json. */
function dockerConfig(current: string | null, contexts: Record<string, string>): { home: string; dir: string } {
  const home = mkdtempSync('/tmp/sbx-dcfg-');
  dirs.push(home);
  const dir = path.join(home, '.docker');
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'config.json'), JSON.stringify(current === null ? { auths: {} } : { auths: {}, currentContext: current }));
  for (const [name, host] of Object.entries(contexts)) {
    const meta = contextMetaPath(dir, name);
    mkdirSync(path.dirname(meta), { recursive: true });
    writeFileSync(meta, JSON.stringify({ Name: name, Metadata: { Description: name }, Endpoints: { docker: { Host: host, SkipTLSVerify: false } } }));
  }
  return { home, dir };
}

describe('resolveEndpoint: where the session\'s docker CLI connects', () => {
  it('DOCKER_HOST wins; a unix socket is watched, since a restarted engine replaces it', async () => {
    const { home } = dockerConfig('colima', { colima: 'unix:///c.sock' });
    expect(await resolveEndpoint({ path: '', home, dockerHost: 'unix:///run/x.sock', dockerContext: 'colima' })).toEqual({ host: 'unix:///run/x.sock', watched: ['/run/x.sock'] });
    expect(await resolveEndpoint({ path: '', home, dockerHost: 'ssh://me@h' })).toEqual({ host: 'ssh://me@h', watched: [] });
  });

  it('DOCKER_CONTEXT, else config.json\'s currentContext, read from docker\'s own context store', async () => {
    const { home, dir } = dockerConfig('desktop-linux', { 'desktop-linux': 'unix:///Users/me/.docker/run/docker.sock', colima: 'unix:///Users/me/.colima/default/docker.sock' });
    expect(await resolveEndpoint({ path: '', home })).toEqual({
      host: 'unix:///Users/me/.docker/run/docker.sock',
      watched: [path.join(dir, 'config.json'), contextMetaPath(dir, 'desktop-linux'), '/Users/me/.docker/run/docker.sock'],
    });
    expect((await resolveEndpoint({ path: '', home, dockerContext: 'colima' })).host).toBe('unix:///Users/me/.colima/default/docker.sock');
  });

  it('DOCKER_CONFIG moves the store; the default context is the default socket; an unknown context has no endpoint', async () => {
    const { dir } = dockerConfig(null, {});
    expect(await resolveEndpoint({ path: '', home: '/nonexistent', dockerConfig: dir })).toEqual({ host: 'unix:///var/run/docker.sock', watched: [path.join(dir, 'config.json'), '/var/run/docker.sock'] });
    expect((await resolveEndpoint({ path: '', home: '/nonexistent', dockerConfig: dir, dockerContext: 'gone' })).host).toBeNull();
  });
});
