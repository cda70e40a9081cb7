import { describe, expect, it } from 'vitest';
import type { ContractParseOptions, ContractSchema } from '../../shared/contracts/contract-schema.js';
import { ENGLISH } from '../../shared/contracts/messages.js';
import { AbsolutePath, ExecText } from '../../shared/contracts/common.js';
import { AcquireResponse, AcquireRequest, type AcquireInput } from '../../shared/contracts/sessions.js';
import { StatusResponse } from '../../shared/contracts/status.js';

/*
 * The published declarations of `sandboxd/shared` (scripts/declarations.js) describe each zod
 * schema as a ContractSchema of its output and ENGLISH as ContractParseOptions: these assignments
 * are what makes that true, checked by the compiler (`npm run lint`), and run once here.
 */
const acquire: ContractSchema<AcquireResponse> = AcquireResponse;
const request: ContractSchema<AcquireInput> = AcquireRequest;
const status: ContractSchema<StatusResponse> = StatusResponse;
const path: ContractSchema<string> = AbsolutePath;
const text: (max: number) => ContractSchema<string> = ExecText;
const english: ContractParseOptions = ENGLISH;

describe('the contract\'s schemas as their published declarations describe them', () => {
  it('parse and safeParse with the options the declarations name', () => {
    expect(path.parse('/x', english)).toBe('/x');
    const refused = text(3).safeParse('long', english);
    expect(refused.success).toBe(false);
    expect(refused.error?.issues[0]).toMatchObject({ code: 'too_big', path: [], message: 'Too big: expected string to have <=3 characters' });
    expect(() => acquire.parse({}, english)).toThrow(Error);
    expect([request, status].every((schema) => !schema.safeParse(null).success)).toBe(true);
  });
});
