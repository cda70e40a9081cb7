import { describe, expect, it } from 'vitest';
import { parseInput } from '../../daemon/http/errors.js';
import { BridgeParams } from '../../shared/contracts/bridges.js';
import { AcquireRequest, HeartbeatBatchRequest, SessionParams } from '../../shared/contracts/sessions.js';
import { SandboxdError } from '../../shared/errors.js';

function refusal(run: () => unknown): SandboxdError {
  try {
    run();
  } catch (error) {
    if (error instanceof SandboxdError) return error;
    throw error;
  }
  throw new Error('accepted');
}

/** What the daemon's own 400s say: a person's words, never the schema's terms or a pattern. */
describe('the daemon words a refused request for people', () => {
  it('an id that is not one it hands out, named once, with the value given', () => {
    expect(refusal(() => parseInput(SessionParams, { id: 'nope' }, 'session id'))).toMatchObject({ code: 'BAD_REQUEST', message: 'the session id "nope" is not in the form sandboxd expects' });
    expect(refusal(() => parseInput(BridgeParams, { id: '../x' }, 'tunnel id')).message).toBe('the tunnel id "../x" is not in the form sandboxd expects');
  });

  it.each([
    ['a missing body', undefined],
    ['an unknown field', { sessions: ['ses_abcdefgh'], extra: 1 }],
    ['a wrong type', { sessions: 'ses_abcdefgh' }],
    ['a malformed id', { sessions: ['../etc/passwd'] }],
    ['too many', { sessions: Array.from({ length: 1001 }, () => 'ses_abcdefgh') }],
  ])('%s: no pattern, no schema wording', (_what, body) => {
    const { message, remedy } = refusal(() => parseInput(HeartbeatBatchRequest, body, 'heartbeat batch'));
    for (const text of [message, remedy]) {
      expect(text).not.toMatch(/schema|\/\^|Invalid|expected \w+, received|Too (big|small)|[<>]=/);
    }
  });

  it('a session request names the field and what is wrong with it', () => {
    const { message } = refusal(() => parseInput(AcquireRequest, { engine: 'lxc' }, 'session request'));
    expect(message).toMatch(/^invalid session request: engine: must be one of docker, podman; /);
    expect(message).not.toMatch(/Invalid|expected \w+, received/);
  });
});
