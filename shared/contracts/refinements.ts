/*
 * The refinements of the contract's strings that an answer's shape (shape.ts) names. A shape is
 * data generated from the zod schemas, and a function cannot be written down in data, so each
 * refinement a shape needs is one of these, by name; shape-of.ts refuses a schema that refines
 * with any other function. No zod here: the client checks answers with these alone.
 */
export const REFINEMENTS = {
  absolute: (value: string): boolean => value.startsWith('/'),
  noNul: (value: string): boolean => !value.includes('\0'),
} as const;

export type RefinementName = keyof typeof REFINEMENTS;
