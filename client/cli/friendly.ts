import { SandboxdError } from '../../shared/errors.js';

/** Request fields as the CLI's options name them. */
const FIELD_OPTIONS: readonly [RegExp, string][] = [
  [/^label$/, '--label'],
  [/^mounts(\.\d+)?$/, '--mount'],
  [/^sockets(\.\d+)?(\.\w+)?$/, '--socket'],
  [/^passEnv(\.(\w+))?$/, '--pass-env'],
  [/^connection$/, '--connection'],
  [/^image$/, '--image'],
  [/^containerUser\.home$/, '--container-home'],
  [/^containerUser(\.\w+)?$/, '--container-user'],
  [/^client\.cwd$/, 'the current directory'],
  [/^client\.path$/, 'PATH'],
  [/^client\.sshAuthSock$/, 'SSH_AUTH_SOCK'],
  [/^client\.env\.(\w+)$/, '$1'],
];

/** zod's own wording, said the way a person reads it. */
const REWORDINGS: readonly [RegExp, string][] = [
  [/^Too big: expected string to have <=(\d+) characters$/, 'is longer than $1 characters'],
  [/^Too small: expected string to have >=1 characters$/, 'is empty'],
  [/^Too big: expected array to have <=(\d+) items$/, 'is given more than $1 times'],
  [/^Too big: expected number to be <=(\d+)$/, 'is larger than $1'],
  [/^Too small: expected number to be >=(\d+)$/, 'is smaller than $1'],
  [/^Invalid input: expected (\w+), received (\w+)$/, 'must be a $1'],
  [/^Invalid option: expected one of (.+)$/, 'must be one of $1'],
  [/^Invalid string: must match pattern .*$/, 'has characters it may not contain'],
];

function optionFor(field: string): string {
  for (const [pattern, option] of FIELD_OPTIONS) {
    if (pattern.test(field)) return field.replace(pattern, option);
  }
  return field;
}

function reword(message: string): string {
  for (const [pattern, replacement] of REWORDINGS) {
    if (pattern.test(message)) return message.replace(pattern, replacement);
  }
  return message;
}

const SCHEMA_FAILURE = /^invalid session request: (.+)$/s;

/**
 * The daemon names request fields in schema terms (`mounts.3: Too big…`); a person typed options.
 * Other errors pass through unchanged.
 */
export function forPeople(error: SandboxdError, command: string): SandboxdError {
  const match = error.code === 'BAD_REQUEST' ? SCHEMA_FAILURE.exec(error.message) : null;
  if (match?.[1] === undefined) return error;
  const parts = match[1].split('; ').map((part) => {
    const colon = part.indexOf(': ');
    return colon < 0 ? reword(part) : `${optionFor(part.slice(0, colon))} ${reword(part.slice(colon + 2))}`;
  });
  return new SandboxdError('BAD_REQUEST', parts.join('; '), { remedy: `Fix that value; see 'sandboxd ${command} --help'.` });
}
