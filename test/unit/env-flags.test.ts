import { describe, expect, it } from 'vitest';
import { envFlag } from '../../client/env-flags.js';

describe('envFlag (SANDBOXD_NO_AUTOSTART and friends)', () => {
  it.each(['1', 'true', 'YES', ' on '])('reads %j as yes', (value) => {
    expect(envFlag({ SANDBOXD_NO_AUTOSTART: value }, 'SANDBOXD_NO_AUTOSTART')).toBe(true);
  });

  it.each([undefined, '', '0', 'False', 'no'])('reads %j as no', (value) => {
    expect(envFlag({ SANDBOXD_NO_AUTOSTART: value }, 'SANDBOXD_NO_AUTOSTART')).toBe(false);
  });

  it('names the variable and its value when it is neither', () => {
    expect(() => envFlag({ SANDBOXD_NO_AUTOSTART: 'maybe' }, 'SANDBOXD_NO_AUTOSTART')).toThrow(
      expect.objectContaining({
        code: 'BAD_REQUEST',
        message: 'SANDBOXD_NO_AUTOSTART is "maybe"; it must be 1, true or yes (or 0, false, no)',
        remedy: 'Fix or unset SANDBOXD_NO_AUTOSTART.',
      }) as Error,
    );
  });
});
