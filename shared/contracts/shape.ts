import { REFINEMENTS, type RefinementName } from './refinements.js';

/*
 * An answer's shape: what a zod schema of the contract accepts, written down as data by
 * shape-of.ts and checked here without zod. Building zod schemas costs a client process more than
 * all the rest of an acquire (the daemon's work included), so the answers a client reads on
 * every launch (answer-shapes.ts) are checked against their shapes instead; the shapes are
 * generated from the schemas, and a test holds the two to the same verdicts.
 */

export type ShapeNode =
  | { kind: 'string'; minLength?: number; maxLength?: number; patterns?: RegExp[]; refinements?: RefinementName[] }
  | { kind: 'number'; integer: boolean; bounds?: { op: '>' | '>=' | '<' | '<='; value: number }[] }
  | { kind: 'boolean' }
  | { kind: 'literal'; values: (string | number | boolean | null)[] }
  | { kind: 'nullable'; of: ShapeNode }
  | { kind: 'optional'; of: ShapeNode }
  | { kind: 'array'; of: ShapeNode; minLength?: number; maxLength?: number }
  | { kind: 'record'; key: ShapeNode; value: ShapeNode }
  /** A strict object: a key it does not list is an error. */
  | { kind: 'object'; fields: Record<string, ShapeNode> }
  | { kind: 'union'; of: ShapeNode[] };

/** The shape of answers of type `T` (the zod schema's output). */
export interface Shape<T> {
  readonly root: ShapeNode;
  /** Never set: carries the answer's type. */
  readonly answer?: T;
}

/** Where an answer leaves its shape: zod's issue, as far as a client reads it. */
export interface ShapeIssue {
  code: 'invalid_type' | 'invalid_value' | 'too_small' | 'too_big' | 'invalid_format' | 'custom' | 'unrecognized_keys' | 'invalid_union';
  path: (string | number)[];
  /** For `unrecognized_keys`: the keys the shape does not list. */
  keys?: string[];
}

export type ShapeResult<T> = { success: true; data: T } | { success: false; error: { issues: ShapeIssue[] } };

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/*
 * The checker runs once per answer in a process that has just started, mostly before the engine
 * compiled any of it: it allocates nothing on the way through a valid answer (an issue's path is
 * built on the way back from the node that failed) and walks with indexed loops, no iterators or
 * callbacks, which an interpreter runs faster (Bun's most of all).
 */

function failure(code: ShapeIssue['code']): ShapeIssue {
  return { code, path: [] };
}

/** `issue`, found by the node under `key`, as the node holding that key reports it. */
function under(key: string | number, issue: ShapeIssue): ShapeIssue {
  issue.path.unshift(key);
  return issue;
}

function checkString(node: Extract<ShapeNode, { kind: 'string' }>, value: unknown): ShapeIssue | null {
  if (typeof value !== 'string') return failure('invalid_type');
  if (node.minLength !== undefined && value.length < node.minLength) return failure('too_small');
  if (node.maxLength !== undefined && value.length > node.maxLength) return failure('too_big');
  const patterns = node.patterns;
  if (patterns !== undefined) for (let index = 0; index < patterns.length; index += 1) if (!(patterns[index] as RegExp).test(value)) return failure('invalid_format');
  const refinements = node.refinements;
  if (refinements !== undefined) for (let index = 0; index < refinements.length; index += 1) if (!REFINEMENTS[refinements[index] as RefinementName](value)) return failure('custom');
  return null;
}

function checkNumber(node: Extract<ShapeNode, { kind: 'number' }>, value: unknown): ShapeIssue | null {
  if (typeof value !== 'number' || !Number.isFinite(value) || (node.integer && !Number.isSafeInteger(value))) return failure('invalid_type');
  const bounds = node.bounds;
  if (bounds === undefined) return null;
  for (let index = 0; index < bounds.length; index += 1) {
    const { op, value: bound } = bounds[index] as (typeof bounds)[number];
    const fits = op === '>' ? value > bound : op === '>=' ? value >= bound : op === '<' ? value < bound : value <= bound;
    if (!fits) return failure(op.startsWith('>') ? 'too_small' : 'too_big');
  }
  return null;
}

function checkObject(node: Extract<ShapeNode, { kind: 'object' }>, value: unknown): ShapeIssue | null {
  if (!isRecord(value)) return failure('invalid_type');
  const fields = node.fields;
  for (const key in fields) {
    const issue = check(fields[key] as ShapeNode, value[key], key in value);
    if (issue !== null) return under(key, issue);
  }
  let unknown: string[] | null = null;
  for (const key in value) if (Object.hasOwn(value, key) && !Object.hasOwn(fields, key)) (unknown ??= []).push(key);
  return unknown === null ? null : { code: 'unrecognized_keys', path: [], keys: unknown };
}

/** `present`: whether an object's key is there at all (an optional field may be absent). */
function check(node: ShapeNode, value: unknown, present = true): ShapeIssue | null {
  switch (node.kind) {
    case 'optional':
      return !present || value === undefined ? null : check(node.of, value);
    case 'nullable':
      return value === null ? null : check(node.of, value, present);
    case 'string':
      return checkString(node, value);
    case 'number':
      return checkNumber(node, value);
    case 'boolean':
      return typeof value === 'boolean' ? null : failure('invalid_type');
    case 'literal':
      return node.values.includes(value as string | number | boolean | null) ? null : failure('invalid_value');
    case 'array': {
      if (!Array.isArray(value)) return failure('invalid_type');
      if (node.minLength !== undefined && value.length < node.minLength) return failure('too_small');
      if (node.maxLength !== undefined && value.length > node.maxLength) return failure('too_big');
      for (let index = 0; index < value.length; index += 1) {
        const issue = check(node.of, value[index]);
        if (issue !== null) return under(index, issue);
      }
      return null;
    }
    case 'record': {
      if (!isRecord(value)) return failure('invalid_type');
      for (const key in value) {
        if (!Object.hasOwn(value, key)) continue;
        const issue = check(node.key, key) ?? check(node.value, value[key]);
        if (issue !== null) return under(key, issue);
      }
      return null;
    }
    case 'object':
      return checkObject(node, value);
    case 'union':
      for (let index = 0; index < node.of.length; index += 1) if (check(node.of[index] as ShapeNode, value) === null) return null;
      return failure('invalid_union');
  }
}

/**
 * Checks an answer against its shape. The answer is JSON the client just parsed, and every shape
 * is of a schema that transforms nothing (shape-of.ts refuses defaults and transforms), so what
 * passes is the answer itself, as zod would have returned it.
 */
export function checkShape<T>(shape: Shape<T>, value: unknown): ShapeResult<T> {
  const issue = check(shape.root, value);
  return issue === null ? { success: true, data: value as T } : { success: false, error: { issues: [issue] } };
}

/** A value of each kind that its node's check runs through, patterns and refinements included. */
const PROBES: Record<ShapeNode['kind'], unknown> = {
  string: 'x',
  number: 0,
  boolean: true,
  literal: null,
  nullable: null,
  optional: undefined,
  array: [],
  record: {},
  object: {},
  union: null,
};

const primed = new WeakSet<ShapeNode>();

/**
 * Checks a throwaway value against each node of the shape, verdicts dropped: the engine
 * compiles the checker's functions and the shape's patterns on their first run, which costs a
 * fresh process more than checking the answer. A client primes the shape while the daemon works
 * on the answer, so that cost is off its path. Each node is primed once per process.
 */
export function primeShape(shape: Shape<unknown>): void {
  const pending = [shape.root];
  for (let node = pending.pop(); node !== undefined; node = pending.pop()) {
    if (primed.has(node)) continue;
    primed.add(node);
    check(node, PROBES[node.kind]);
    // V8 runs a regular expression's first match in its interpreter and compiles it to machine
    // code on the next: run twice, a pattern (an ISO timestamp's is long) meets the answer compiled.
    if (node.kind === 'string' && node.patterns !== undefined) check(node, PROBES.string);
    if (node.kind === 'nullable' || node.kind === 'optional' || node.kind === 'array') pending.push(node.of);
    else if (node.kind === 'record') pending.push(node.key, node.value);
    else if (node.kind === 'object') pending.push(...Object.values(node.fields));
    else if (node.kind === 'union') pending.push(...node.of);
  }
}
