import en from 'zod/v4/locales/en.js';

/**
 * Parse options that give issues zod's English messages ("Too big: expected string to have <=3
 * characters"). zod/mini loads no locale, part of why it starts fast; asking per parse
 * leaves the global configuration of a host program's own zod alone.
 */
export const ENGLISH = { error: en().localeError } as const;
