import type * as z from 'zod/mini';
import { ENGLISH } from '../../shared/contracts/messages.js';
import { SandboxdError } from '../../shared/errors.js';

/** Routes parse their inputs with the shared schemas; a failure is a BAD_REQUEST naming the field. */
export function parseInput<T extends z.ZodMiniType>(schema: T, value: unknown, what: string): z.output<T> {
  const result = schema.safeParse(value, ENGLISH);
  if (result.success) return result.data;
  const detail = result.error.issues
    .slice(0, 5)
    .map((issue) => `${issue.path.length === 0 ? what : issue.path.join('.')}: ${issue.message}`)
    .join('; ');
  throw new SandboxdError('BAD_REQUEST', `invalid ${what}: ${detail}`);
}
