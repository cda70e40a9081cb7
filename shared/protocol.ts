/** Bumped on any incompatible change to a request or response under API_PREFIX. */
export const PROTOCOL_VERSION = 4;
export const API_PREFIX = '/v1';
/** Every response carries it, so a client detects a mismatched daemon on its first call. */
export const PROTOCOL_HEADER = 'sandboxd-protocol';
/** Request bodies above this size are refused with PAYLOAD_TOO_LARGE. */
export const BODY_LIMIT_BYTES = 64 * 1024;
