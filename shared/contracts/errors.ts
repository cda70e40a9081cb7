import * as z from 'zod/mini';
import { ERROR_SPECS, type ErrorCode as Code, type ErrorObject as Fields } from '../errors.js';

/** The codes of ERROR_SPECS: the table in errors.ts is the one list, this is its schema. */
export const ErrorCode = z.enum(Object.keys(ERROR_SPECS) as [Code, ...Code[]]);
export type ErrorCode = Code;

export const ErrorObject = z.strictObject({
  code: ErrorCode,
  message: z.string(),
  remedy: z.string(),
}) satisfies z.ZodMiniType<Fields>;
export type ErrorObject = Fields;

/** How every error crosses the wire. */
export const ErrorBody = z.strictObject({ error: ErrorObject });
export type ErrorBody = z.infer<typeof ErrorBody>;
