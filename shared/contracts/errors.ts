import * as z from 'zod/mini';
import { ERROR_SPECS } from '../errors.js';

export const ErrorCode = z.enum(Object.keys(ERROR_SPECS) as [keyof typeof ERROR_SPECS, ...(keyof typeof ERROR_SPECS)[]]);
export type ErrorCode = z.infer<typeof ErrorCode>;

export const ErrorObject = z.strictObject({
  code: ErrorCode,
  message: z.string(),
  remedy: z.string(),
});
export type ErrorObject = z.infer<typeof ErrorObject>;

/** How every error crosses the wire. */
export const ErrorBody = z.strictObject({ error: ErrorObject });
export type ErrorBody = z.infer<typeof ErrorBody>;
