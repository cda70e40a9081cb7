/*
 * What the contract's schemas (zod/mini schemas, bundled with the package) are to a program that
 * uses `sandboxd/shared` without zod of its own: the published type declarations name these
 * instead of zod's types (scripts/declarations.js), so they need no zod to be read. A type test
 * (test/unit/contract-schema.test.ts) holds zod's schemas to them.
 */

/** Where a value breaks a schema, as zod reports it (`message` in zod's words; see ENGLISH). */
export interface ContractIssue {
  readonly code: string;
  readonly path: PropertyKey[];
  readonly message: string;
}

/** Parse options: `ENGLISH` (from `sandboxd/shared`) for English messages. */
export interface ContractParseOptions {
  readonly error?: unknown;
  readonly reportInput?: boolean;
  readonly jitless?: boolean;
}

export type ContractParseResult<T> = { success: true; data: T; error?: never } | { success: false; data?: never; error: Error & { issues: ContractIssue[] } };

/** A schema of the wire contract, checking values of type `T`. */
export interface ContractSchema<T> {
  /** The value, checked; throws an Error with `issues` when it breaks the schema. */
  parse(data: unknown, params?: ContractParseOptions): T;
  safeParse(data: unknown, params?: ContractParseOptions): ContractParseResult<T>;
}
