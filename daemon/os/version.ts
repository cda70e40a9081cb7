import { PACKAGE } from './package-files.js';

export const VERSION = PACKAGE?.version ?? '0.0.0-unknown';
