import * as z from 'zod';

export const Engine = z.enum(['docker', 'podman']);
export type Engine = z.infer<typeof Engine>;

/** Bounded strings: every field that crosses the socket has a ceiling. */
export const AbsolutePath = z
  .string()
  .min(1)
  .max(4096)
  .refine((value) => value.startsWith('/'), 'must be an absolute path')
  .refine((value) => !value.includes('\0'), 'must not contain NUL');

/** Free text that reaches an exec'd process (env, argv): NUL would make the exec itself fail. */
export const ExecText = (max: number) => z.string().max(max).refine((value) => !value.includes('\0'), 'must not contain NUL');

export const Timestamp = z.iso.datetime();
export const Id = z.string().regex(/^[a-z]+_[A-Za-z0-9]{6,40}$/);
