export * from './protocol.js';
export * from './errors.js';
export * from './paths.js';
export * from './contracts/common.js';
export { ErrorCode, ErrorObject, ErrorBody } from './contracts/errors.js';
export * from './contracts/plan.js';
export * from './contracts/sessions.js';
export * from './contracts/bridges.js';
export * from './contracts/status.js';
