/**
 * Names and values read from the sandbox's git dir, checked before any of them reaches the host's
 * git: a ref name as `git check-ref-format` accepts it (refs.c), an object id as exactly the hex
 * digits of the repository's hash. Nothing else a sandbox writes is ever passed on.
 */

/** Characters git refuses anywhere in a ref name: controls, DEL, space and `~^:?*[\`. */
// eslint-disable-next-line no-control-regex -- control characters are exactly what is refused
const BAD_CHARACTER = /[\u0000-\u0020\u007f~^:?*[\\]/;

/** One path component as `check_refname_component` reads it. */
function componentOk(component: string): boolean {
  return component !== '' && !component.startsWith('.') && !component.endsWith('.lock');
}

/**
 * `git check-ref-format <name>` with no options: at least two components (`refs/…`), none empty,
 * none starting with `.` or ending with `.lock`; no `..`, no `@{`, not `@` alone, no trailing `.`
 * or `/`, no control character, space or any of `~^:?*[\`.
 */
export function isValidRefName(name: string): boolean {
  if (name === '@' || name.endsWith('.') || name.includes('..') || name.includes('@{') || BAD_CHARACTER.test(name)) return false;
  const components = name.split('/');
  return components.length >= 2 && components.every(componentOk);
}

/** Hex digits in an object id: 40 for SHA-1 repositories, 64 for SHA-256 ones. */
export type HexLength = 40 | 64;

export function isObjectId(value: string, hexLength: HexLength): boolean {
  return value.length === hexLength && /^[0-9a-f]+$/.test(value);
}

/** The all-zero id git's `update-ref` reads as "must not exist yet". */
export function zeroId(hexLength: HexLength): string {
  return '0'.repeat(hexLength);
}
