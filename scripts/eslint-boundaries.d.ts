import type { ESLint } from 'eslint';

export const CLIENT_SURFACE: readonly string[];
export function readImportGraph(root: string): Map<string, string[]>;
export function boundaryViolation(file: string, target: string): string | null;
export function violations(graph: ReadonlyMap<string, readonly string[]>): { file: string; target: string; reason: string }[];
export const boundariesPlugin: ESLint.Plugin;
