import * as z from 'zod/mini';
import { REFINEMENTS } from './refinements.js';
import { ENGINES } from './session-routes.js';

export const Engine = z.enum(ENGINES);
export type Engine = z.infer<typeof Engine>;

/** Bounded strings: every field that crosses the socket has a ceiling. */
export const AbsolutePath = z.string().check(
  z.minLength(1),
  z.maxLength(4096),
  z.refine(REFINEMENTS.absolute, 'must be an absolute path'),
  z.refine(REFINEMENTS.noNul, 'must not contain NUL'),
);

/** Free text that reaches an exec'd process (env, argv): NUL would make the exec itself fail. */
export const ExecText = (max: number) => z.string().check(z.maxLength(max), z.refine(REFINEMENTS.noNul, 'must not contain NUL'));

/** A whole number of things or milliseconds. */
export const Count = z.int().check(z.minimum(0));

export const Timestamp = z.iso.datetime();
export const Id = z.string().check(z.regex(/^[a-z]+_[A-Za-z0-9]{6,40}$/));
