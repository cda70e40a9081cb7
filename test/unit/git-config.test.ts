import { describe, expect, it } from 'vitest';
import { isCredentialStore, isPrivateSshFile, parseConfigList, pathKind } from '../../daemon/plan/git/git-config.js';

/** What `git config --list --show-origin --show-scope --includes -z` printed for a real home. */
const listing = [
  'global', 'file:/h/.config/git/config', 'color.ui\nauto',
  'global', 'file:/h/.gitconfig', 'include.path\ninc/a.inc',
  'global', 'file:/h/inc/a.inc', 'user.email\nnested@example.com',
  'global', 'file:/h/.gitconfig', 'credential.https://Example.com/MyOrg.helper\nstore',
  'global', 'file:/h/.gitconfig', 'core.bare',
  'command', 'command line:', 'core.pager\nless',
  'local', 'file:/repo/.git/config', 'core.filemode\ntrue',
  '',
].join('\0');

describe('git config listings', () => {
  it('parses records, keys without a value included, and skips what no file set', () => {
    const entries = parseConfigList(listing);
    expect(entries).toHaveLength(6);
    expect(entries[4]).toEqual({ scope: 'global', file: '/h/.gitconfig', key: 'core.bare', value: null });
    expect(entries.map((entry) => entry.scope)).not.toContain('command');
  });

  it('keeps the case of a subsection, which git does not fold (a credential URL\'s path)', () => {
    const upper = parseConfigList(['global', 'file:/h/.gitconfig', 'Credential.https://Example.com/MyOrg.Helper\nx', ''].join('\0'));
    expect(upper[0]?.key).toBe('credential.https://Example.com/MyOrg.helper');
  });
});

describe('files the sandbox never gets', () => {
  it('credential stores, wherever the config names them', () => {
    expect(isCredentialStore('/h/.git-credentials')).toBe(true);
    expect(isCredentialStore('/h/.config/git/credentials')).toBe(true);
    expect(isCredentialStore('/h/.config/git/config')).toBe(false);
  });

  it('in ~/.ssh, everything but public keys, known_hosts and allowed signers', () => {
    expect(isPrivateSshFile('/h/.ssh/id_ed25519', '/h')).toBe(true);
    expect(isPrivateSshFile('/h/.ssh/client.pem', '/h')).toBe(true);
    expect(isPrivateSshFile('/h/.ssh/id_ed25519.pub', '/h')).toBe(false);
    expect(isPrivateSshFile('/h/.ssh/known_hosts', '/h')).toBe(false);
    expect(isPrivateSshFile('/h/.ssh/allowed_signers', '/h')).toBe(false);
    expect(isPrivateSshFile('/h/certs/client.pem', '/h')).toBe(false);
  });
});

describe('pathname-typed keys', () => {
  it('names what each key\'s path is, http.<url>.* as http.*', () => {
    expect(pathKind('core.excludesfile')).toBe('file');
    expect(pathKind('gpg.ssh.allowedsignersfile')).toBe('file');
    expect(pathKind('fetch.fsck.skiplist')).toBe('file');
    expect(pathKind('http.https://corp.example.com/.sslcainfo')).toBe('file');
    expect(pathKind('http.https://corp.example.com/.sslkey')).toBe('secret');
    expect(pathKind('http.cookiefile')).toBe('secret');
    expect(pathKind('core.hookspath')).toBe('directory');
    expect(pathKind('safe.directory')).toBe('repository');
    expect(pathKind('user.signingkey')).toBe('signing-key');
    expect(pathKind('user.email')).toBeNull();
    expect(pathKind('remote.origin.url')).toBeNull();
  });
});
