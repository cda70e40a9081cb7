import type * as z from 'zod/mini';
import { REFINEMENTS, type RefinementName } from './refinements.js';
import type { ShapeNode } from './shape.js';

/*
 * Writes a zod schema of the contract down as a shape (shape.ts), for scripts/answer-shapes.js
 * and the test that holds the generated shapes to their schemas. Only what the contract's answers
 * use is understood; anything else (a default, a transform, a function of its own in a refine)
 * is refused by name, so a shape never silently accepts less or more than its schema.
 */

type CheckDef =
  | { check: 'min_length'; minimum: number }
  | { check: 'max_length'; maximum: number }
  | { check: 'greater_than' | 'less_than'; value: number; inclusive: boolean }
  | { check: 'string_format'; format: string; pattern?: RegExp }
  | { check: 'number_format'; format: string }
  | { check: 'custom'; fn: unknown }
  | { check: string };

const REFINEMENT_NAMES = new Map<unknown, RefinementName>(Object.entries(REFINEMENTS).map(([name, fn]) => [fn, name as RefinementName]));

function refused(path: string, what: string): Error {
  return new Error(`${path}: ${what}, which an answer's shape cannot write down (shared/contracts/shape-of.ts)`);
}

function checksOf(schema: z.core.$ZodType): CheckDef[] {
  return (schema._zod.def.checks ?? []).map((check) => check._zod.def as CheckDef);
}

function stringShape(schema: z.core.$ZodType, path: string): ShapeNode {
  const node: Extract<ShapeNode, { kind: 'string' }> = { kind: 'string' };
  const own = schema._zod.def as { format?: string; pattern?: RegExp };
  const patterns: RegExp[] = own.pattern === undefined ? [] : [own.pattern];
  const refinements: RefinementName[] = [];
  for (const check of checksOf(schema)) {
    if (check.check === 'min_length' && 'minimum' in check) node.minLength = Math.max(node.minLength ?? 0, check.minimum);
    else if (check.check === 'max_length' && 'maximum' in check) node.maxLength = Math.min(node.maxLength ?? Infinity, check.maximum);
    else if (check.check === 'string_format' && 'pattern' in check && check.pattern !== undefined) patterns.push(check.pattern);
    else if (check.check === 'custom' && 'fn' in check) {
      const name = REFINEMENT_NAMES.get(check.fn);
      if (name === undefined) throw refused(path, 'a refine with a function not in shared/contracts/refinements.ts');
      refinements.push(name);
    } else throw refused(path, `a string check ${check.check}`);
  }
  if (own.format !== undefined && own.pattern === undefined) throw refused(path, `the string format ${own.format} without a pattern`);
  if (patterns.length > 0) node.patterns = patterns;
  if (refinements.length > 0) node.refinements = refinements;
  return node;
}

function numberShape(schema: z.core.$ZodType, path: string): ShapeNode {
  const own = schema._zod.def as { format?: string };
  if (own.format !== undefined && own.format !== 'safeint') throw refused(path, `the number format ${own.format}`);
  let integer = own.format === 'safeint';
  const bounds: { op: '>' | '>=' | '<' | '<='; value: number }[] = [];
  for (const check of checksOf(schema)) {
    if ((check.check === 'greater_than' || check.check === 'less_than') && 'inclusive' in check) {
      bounds.push({ op: `${check.check === 'greater_than' ? '>' : '<'}${check.inclusive ? '=' : ''}`, value: check.value });
    } else if (check.check === 'number_format' && 'format' in check && check.format === 'safeint') {
      integer = true;
    } else throw refused(path, `a number check ${check.check}`);
  }
  return { kind: 'number', integer, ...(bounds.length > 0 ? { bounds } : {}) };
}

/** The shape of `schema`; `path` names where it is, for the error that refuses it. */
export function shapeOf(schema: z.core.$ZodType, path = 'the schema'): ShapeNode {
  const def = (schema as z.core.$ZodTypes)._zod.def;
  const plain = (what: string): void => {
    if ((def.checks ?? []).length > 0) throw refused(path, `checks on ${what}`);
  };
  switch (def.type) {
    case 'string':
      return stringShape(schema, path);
    case 'number':
      return numberShape(schema, path);
    case 'boolean':
      plain('a boolean');
      return { kind: 'boolean' };
    case 'literal':
      plain('a literal');
      return { kind: 'literal', values: def.values.map((value) => (typeof value === 'bigint' || value === undefined ? failLiteral(path) : value)) };
    case 'enum':
      plain('an enum');
      return { kind: 'literal', values: Object.values(def.entries) };
    case 'nullable':
      return { kind: 'nullable', of: shapeOf(def.innerType, path) };
    case 'optional':
      return { kind: 'optional', of: shapeOf(def.innerType, path) };
    case 'array': {
      const node: Extract<ShapeNode, { kind: 'array' }> = { kind: 'array', of: shapeOf(def.element, `${path}[]`) };
      for (const check of checksOf(schema)) {
        if (check.check === 'min_length' && 'minimum' in check) node.minLength = check.minimum;
        else if (check.check === 'max_length' && 'maximum' in check) node.maxLength = check.maximum;
        else throw refused(path, `an array check ${check.check}`);
      }
      return node;
    }
    case 'record':
      plain('a record');
      return { kind: 'record', key: shapeOf(def.keyType, `${path} (key)`), value: shapeOf(def.valueType, `${path}{}`) };
    case 'object': {
      plain('an object');
      if (def.catchall?._zod.def.type !== 'never') throw refused(path, 'an object that is not strict');
      const fields: Record<string, ShapeNode> = {};
      for (const [key, field] of Object.entries(def.shape)) fields[key] = shapeOf(field, `${path}.${key}`);
      return { kind: 'object', fields };
    }
    case 'union':
      plain('a union');
      return { kind: 'union', of: def.options.map((option, index) => shapeOf(option, `${path}|${String(index)}`)) };
    default:
      throw refused(path, `a ${def.type}`);
  }
}

function failLiteral(path: string): never {
  throw refused(path, 'a literal that JSON cannot carry');
}
