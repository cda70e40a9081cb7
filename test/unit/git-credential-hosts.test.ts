import { describe, expect, it } from 'vitest';
import { SandboxdError } from '../../shared/errors.js';
import { isNormalCredentialHost, normalizeCredentialHost, parseCredentialHosts } from '../../shared/git-credential-hosts.js';

describe('git credential hosts', () => {
  it('normalises a host: lower case, :443 left out, other ports kept, IPv6 in brackets', () => {
    expect(normalizeCredentialHost('GitHub.com')).toEqual({ host: 'github.com' });
    expect(normalizeCredentialHost('github.com:443')).toEqual({ host: 'github.com' });
    expect(normalizeCredentialHost(' git.example.com:8443 ')).toEqual({ host: 'git.example.com:8443' });
    expect(normalizeCredentialHost('127.0.0.1:3000')).toEqual({ host: '127.0.0.1:3000' });
    expect(normalizeCredentialHost('[::1]:8443')).toEqual({ host: '[::1]:8443' });
    expect(normalizeCredentialHost('[::1]')).toEqual({ host: '[::1]' });
  });

  it.each([
    ['https://github.com', 'scheme'],
    ['github.com/org/repo', 'path'],
    ['user@github.com', 'user'],
    ['*.github.com', 'wildcard'],
    ['github.com:0', 'port'],
    ['github.com:65536', 'port'],
    ['github.com:08443', 'port'],
    ['github.com:', 'port'],
    ['git hub.com', 'host'],
    ['-github.com', 'host'],
    ['github..com', 'host'],
    ['[nothost]:1', 'host'],
    ['::1', 'HOST:PORT'],
    ['', 'empty'],
    ['github.com\nevil.com', 'host'],
  ])('refuses %j (%s)', (value, word) => {
    const checked = normalizeCredentialHost(value);
    expect('error' in checked ? checked.error : null).toContain(word);
  });

  it('the wire takes normalised hosts only', () => {
    expect(isNormalCredentialHost('github.com')).toBe(true);
    expect(isNormalCredentialHost('GitHub.com')).toBe(false);
    expect(isNormalCredentialHost('github.com:443')).toBe(false);
  });

  it('parses HOST[:PORT][,…] from repeated flags, each once, and names the source in a pasteable error', () => {
    expect(parseCredentialHosts(['github.com,GitHub.com:443', 'git.example.com:8443', ''], '--git-credentials')).toEqual(['github.com', 'git.example.com:8443']);
    try {
      parseCredentialHosts(['github.com,https://gitlab.com'], 'SANDBOXD_GIT_CREDENTIALS');
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(SandboxdError);
      expect((error as SandboxdError).code).toBe('GIT_CREDENTIALS_INVALID');
      expect((error as SandboxdError).message).toBe('SANDBOXD_GIT_CREDENTIALS: "https://gitlab.com" has a scheme (name the host only: https is implied)');
      expect((error as SandboxdError).remedy).toContain('--git-credentials github.com,git.example.com:8443');
    }
    expect(() => parseCredentialHosts([Array.from({ length: 17 }, (_, i) => `h${String(i)}.example`).join(',')], 'x')).toThrow('at most 16');
  });
});
