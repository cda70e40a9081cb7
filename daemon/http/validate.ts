import type * as z from 'zod/mini';
import { SandboxdError } from '../../shared/errors.js';

type Issue = z.core.$ZodIssue;

function limitOf(issue: Issue & { maximum?: number | bigint; minimum?: number | bigint }): string {
  const limit = issue.maximum ?? issue.minimum;
  return limit === undefined ? '' : limit.toString();
}

/**
 * An issue in a person's words: what is wrong with the value, never the schema's terms or a
 * pattern (those stay in the code). The field it names comes first, as the caller formats it.
 */
function plainIssue(issue: Issue): string {
  switch (issue.code) {
    case 'too_big':
      return issue.origin === 'string' ? `is longer than ${limitOf(issue)} characters` : issue.origin === 'array' ? `has more than ${limitOf(issue)} entries` : `is larger than ${limitOf(issue)}`;
    case 'too_small':
      if (limitOf(issue) === '1' && (issue.origin === 'string' || issue.origin === 'array')) return 'is empty';
      if (issue.origin === 'string') return `is shorter than ${limitOf(issue)} characters`;
      return issue.origin === 'array' ? `has fewer than ${limitOf(issue)} entries` : `is smaller than ${limitOf(issue)}`;
    case 'invalid_type':
      return issue.input === undefined ? 'is missing' : `must be a ${issue.expected}`;
    case 'invalid_value':
      return `must be one of ${issue.values.map(String).join(', ')}`;
    case 'invalid_format':
      return 'is not in the form sandboxd expects';
    case 'unrecognized_keys':
      return `has fields sandboxd does not know (${issue.keys.join(', ')})`;
    case 'custom':
      return issue.message;
    default:
      return 'is not a value sandboxd accepts';
  }
}

/** Routes parse their inputs with the shared schemas; a failure is a BAD_REQUEST naming the field. */
export function parseInput<T extends z.ZodMiniType>(schema: T, value: unknown, what: string): z.output<T> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issues = result.error.issues.slice(0, 5);
  // A route parameter (`session id`) is the whole value: named once, as the person gave it.
  if (issues.every((issue) => issue.path.length <= 1 && what.endsWith(` ${String(issue.path[0] ?? 'id')}`))) {
    throw new SandboxdError('BAD_REQUEST', `the ${what} ${issues.map(plainIssue).join(' and ')}`);
  }
  const detail = issues.map((issue) => (issue.path.length === 0 ? plainIssue(issue) : `${issue.path.join('.')}: ${plainIssue(issue)}`)).join('; ');
  throw new SandboxdError('BAD_REQUEST', `invalid ${what}: ${detail}`);
}
