import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/lab/global-setup.ts'],
    setupFiles: ['test/lab/own-cwd.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Two cores: end-to-end files start daemons and containers; keep them from starving each other.
    maxWorkers: 2,
  },
});
