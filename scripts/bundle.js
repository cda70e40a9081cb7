// Bundles the `sandboxd` command into dist/bin: one file for the entry and one chunk per command
// module, so a start reads a handful of files instead of hundreds of node_modules (issue 13).
// The library entries (`sandboxd/client` and friends) stay tsc's output: their users bundle them.
import { build } from 'esbuild';
import { chmodSync, rmSync } from 'node:fs';
import path from 'node:path';

const OUT = 'dist/bin';

/**
 * zod's `z.locales` namespace pulls every language's messages (about half of zod's bytes) into
 * each start; sandboxd only ever reports in English, which zod configures from `en.js` itself.
 */
const englishOnly = {
  name: 'zod-english-only',
  setup(build) {
    build.onResolve({ filter: /^\.\.\/locales\/index\.js$/ }, (args) =>
      args.importer.includes(`${path.sep}zod${path.sep}`) ? { path: path.join(path.dirname(args.importer), '../locales/index.js'), namespace: 'zod-locales' } : undefined,
    );
    build.onLoad({ filter: /.*/, namespace: 'zod-locales' }, (args) => ({
      contents: `export { default as en } from ${JSON.stringify(path.join(path.dirname(args.path), 'en.js'))};`,
      resolveDir: path.dirname(args.path),
    }));
  },
};

rmSync(OUT, { recursive: true, force: true });
/**
 * Node's builtins as CommonJS, through process.getBuiltinModule: an ESM `import` of one builds its
 * ESM facade, which reads every export, lazy ones included, and on Node 24 `node:fs` then loads
 * its streams and `node:http` loads undici (about 30 ms of each start, for nothing used here).
 */
const builtinsWithoutFacade = {
  name: 'builtins-without-facade',
  setup(build) {
    build.onResolve({ filter: /^node:/ }, (args) => ({ path: args.path, namespace: 'builtin' }));
    build.onLoad({ filter: /.*/, namespace: 'builtin' }, (args) => ({
      contents: `module.exports = process.getBuiltinModule(${JSON.stringify(args.path)});`,
      loader: 'js',
    }));
  },
};

await build({
  entryPoints: { sandboxd: 'client/cli/main.ts' },
  outdir: OUT,
  chunkNames: 'chunks/[name]-[hash]',
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20.19',
  sourcemap: 'linked',
  // Whitespace and syntax only: names stay readable in stack traces; parsing is what a start pays for.
  minifyWhitespace: true,
  minifySyntax: true,
  plugins: [englishOnly, builtinsWithoutFacade],
  logLevel: 'warning',
  // CommonJS dependencies (pino, fastify, proper-lockfile) call require() for node's builtins.
  banner: { js: "import { createRequire as __sandboxdRequire } from 'node:module'; const require = __sandboxdRequire(import.meta.url);" },
});
chmodSync(`${OUT}/sandboxd.js`, 0o755);
