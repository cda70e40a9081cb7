import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import { boundariesPlugin } from './scripts/eslint-boundaries.js';

export default tseslint.config(
  { ignores: ['dist/', 'dist-bench/', 'node_modules/', 'coverage/'] },
  js.configs.recommended,
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/restrict-template-expressions': ['error', { allowNumber: true }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
    },
  },
  { files: ['eslint.config.js', 'scripts/*.js'], extends: [tseslint.configs.disableTypeChecked] },
  // The layout's import directions (scripts/eslint-boundaries.js).
  { files: ['shared/**/*.ts', 'daemon/**/*.ts', 'client/**/*.ts'], plugins: { sandboxd: boundariesPlugin }, rules: { 'sandboxd/boundaries': 'error' } },
);
