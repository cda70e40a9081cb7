/** Longest echo of a caller's value in a message or log line: a 4 KiB path must not cost 4 KiB a line. */
export const ECHO_MAX_CHARS = 200;

/** Shortens a value for echoing, marking the cut with an ellipsis. */
export function clip(value: string, max = ECHO_MAX_CHARS): string {
  return value.length <= max ? value : `${value.slice(0, max)}…`;
}
