/**
 * A bound the sandbox's git dir exceeded (too many refs, a packed-refs or object store too large,
 * too many directories to watch). What sandboxd cannot finish within its bounds it does not pass
 * over: the sessions on the repository end, and the reason is said.
 */
export class SyncBound extends Error {
  override readonly name = 'SyncBound';
}
