import { describe, expect, it } from 'vitest';
import { fillInput, parseFillOutput, parseRequest, renderAnswer } from '../../daemon/credentials/credential-request.js';

const ALLOWED = new Set(['github.com', '127.0.0.1:8443']);

function request(...lines: string[]): string {
  return `${lines.join('\n')}\n`;
}

describe('a credential request from a sandbox', () => {
  it('a get for a named host becomes a query of protocol, host, and the username and path git named', () => {
    expect(parseRequest(request('action=get', 'timeout=900', 'protocol=https', 'host=github.com', 'username=me', 'path=org/repo.git', 'capability[]=authtype'), ALLOWED)).toEqual({
      ok: true,
      query: { protocol: 'https', host: 'github.com', username: 'me', path: 'org/repo.git' },
    });
    // The same origin however git wrote it: the port 443 and case are normalised on both sides.
    expect(parseRequest(request('action=get', 'protocol=https', 'host=GitHub.com:443'), ALLOWED)).toEqual({ ok: true, query: { protocol: 'https', host: 'github.com' } });
  });

  it.each([
    [['action=store', 'protocol=https', 'host=github.com', 'password=x'], 'is not get'],
    [['action=erase', 'protocol=https', 'host=github.com'], 'is not get'],
    [['protocol=https', 'host=github.com'], 'is not get'],
    [['action=get', 'protocol=http', 'host=github.com'], 'is not https'],
    [['action=get', 'host=github.com'], 'is not https'],
    [['action=get', 'protocol=https', 'host=github.com.evil.example'], 'not one this session'],
    [['action=get', 'protocol=https', 'host=evilgithub.com'], 'not one this session'],
    [['action=get', 'protocol=https', 'host=github.co'], 'not one this session'],
    [['action=get', 'protocol=https', 'host=127.0.0.1:8444'], 'not one this session'],
    [['action=get', 'protocol=https', 'host=127.0.0.1'], 'not one this session'],
    [['action=get', 'protocol=https', 'host=me@github.com'], 'user name'],
    [['action=get', 'protocol=https', 'host=github.com/x'], 'path'],
    [['action=get', 'protocol=https', 'host=github.com', 'host=evil.example'], 'host twice'],
    [['action=get', 'protocol=https', 'protocol=https', 'host=github.com'], 'protocol twice'],
    [['action=get', 'protocol=https', 'url=https://github.com', 'host=github.com'], 'url'],
    [['action=get', 'protocol=https', 'host'], 'not key=value'],
  ])('refuses %j', (lines, reason) => {
    const parsed = parseRequest(request(...lines), ALLOWED);
    expect(parsed.ok ? null : parsed.reason).toContain(reason);
  });

  it('refuses NUL and CR anywhere, where git and a helper could read different values', () => {
    expect(parseRequest('action=get\nprotocol=https\nhost=github.com\0evil\n', ALLOWED)).toEqual({ ok: false, reason: 'the request holds a NUL byte' });
    expect(parseRequest('action=get\nprotocol=https\r\nhost=github.com\n', ALLOWED)).toEqual({ ok: false, reason: 'the request holds a carriage return' });
  });

  it('reads up to the first empty line, as git does', () => {
    expect(parseRequest('action=get\nprotocol=https\nhost=github.com\n\nhost=evil.example\n', ALLOWED)).toEqual({ ok: true, query: { protocol: 'https', host: 'github.com' } });
  });

  it('the host git is fed only what was checked, and only the username, password and expiry go back', () => {
    expect(fillInput({ protocol: 'https', host: 'github.com', username: 'me' })).toBe('protocol=https\nhost=github.com\nusername=me\n\n');
    const answer = parseFillOutput('protocol=https\nhost=github.com\nusername=me\npassword=tok\npassword_expiry_utc=1700000000\nquit=1\n');
    expect(answer).toEqual({ username: 'me', password: 'tok', passwordExpiryUtc: '1700000000' });
    expect(renderAnswer(answer ?? { username: '', password: '' })).toBe('username=me\npassword=tok\npassword_expiry_utc=1700000000\n');
    expect(parseFillOutput('protocol=https\nhost=github.com\nusername=me\n')).toBeNull();
    expect(parseFillOutput('username=me\npassword=\n')).toBeNull();
  });
});
