// Bundles the `sandboxd` command into dist/bin: a small entry, and one self-contained bundle per
// command module (client/cli/entries/*), so a start reads two files instead of hundreds of
// node_modules or a graph of shared chunks. Each process loads one command bundle, so
// what they share (commander, zod) is never loaded twice. The library entries (`sandboxd/client`,
// `sandboxd/llxprt`, `sandboxd/shared`) are one file each too (see the end), so the package needs
// no runtime dependency: installing it fetches nothing and works offline.
import { build } from 'esbuild';
import { chmodSync, readdirSync, rmSync } from 'node:fs';
import process from 'node:process';

const OUT = 'dist/bin';

/**
 * Node's builtins as CommonJS, through process.getBuiltinModule: an ESM `import` of one builds its
 * ESM facade, which reads every export, lazy ones included, and on Node 24 `node:fs` then loads
 * its streams and `node:http` loads undici: start-up time for nothing used here.
 */
const builtinsWithoutFacade = {
  name: 'builtins-without-facade',
  setup(build) {
    build.onResolve({ filter: /^node:/ }, (args) => ({ path: args.path, namespace: 'builtin' }));
    build.onLoad({ filter: /.*/, namespace: 'builtin' }, (args) => ({
      contents: LAZY_BUILTINS.has(args.path) ? lazyBuiltin(args.path) : `module.exports = process.getBuiltinModule(${JSON.stringify(args.path)});`,
      loader: 'js',
    }));
  },
};

/**
 * Loaded on first use, not on import: commander requires child_process at its top (for
 * subcommands it runs as executables, which sandboxd has none of), and loading it costs every
 * command start-up time though only `run`, `daemon` and auto-start ever spawn; fs/promises loads
 * readline and the file watchers, and a warm `run` never calls what imports it (starting
 * a daemon does). Their exports are plain functions, classes and constants, so an object of
 * getters stands in for each.
 */
const LAZY_BUILTINS = new Set(['node:child_process', 'node:fs/promises']);

function lazyBuiltin(name) {
  const getters = Object.keys(process.getBuiltinModule(name)).map((key) => `get ${key}() { return load().${key}; }`);
  return `let loaded;\nconst load = () => (loaded ??= process.getBuiltinModule(${JSON.stringify(name)}));\nmodule.exports = { ${getters.join(', ')} };`;
}

const ENTRIES = 'client/cli/entries';
const entryPoints = {
  sandboxd: 'client/cli/bin.ts',
  ...Object.fromEntries(readdirSync(ENTRIES).filter((name) => name.endsWith('.ts')).map((name) => [`entries/${name.slice(0, -3)}`, `${ENTRIES}/${name}`])),
};

/** Both builds: one ESM file per entry for Node >= 20.19, node's builtins without their facades. */
const SHARED = {
  bundle: true,
  format: 'esm',
  platform: 'node',
  target: 'node20.19',
  // For a clone's stack traces; the package ships no maps (package.json's `files`).
  sourcemap: 'linked',
  // Whitespace and syntax only: names stay readable in stack traces; parsing is what a start pays for.
  minifyWhitespace: true,
  minifySyntax: true,
  plugins: [builtinsWithoutFacade],
  logLevel: 'warning',
};

rmSync(OUT, { recursive: true, force: true });
await build({
  ...SHARED,
  entryPoints,
  outdir: OUT,
  // CommonJS dependencies (pino, fastify, proper-lockfile) call require() for node's builtins.
  banner: { js: "import { createRequire as __sandboxdRequire } from 'node:module'; const require = __sandboxdRequire(import.meta.url);" },
});
chmodSync(`${OUT}/sandboxd.js`, 0o755);

// The library entries replace tsc's dist/client/index.js, dist/client/llxprt/index.js and
// dist/shared/index.js with one file each (their types stay tsc's). `sandboxd/llxprt` is imported by
// llxprt on every sandbox launch, and the zod it carries, tree-shaken, loads in a fraction of the
// time of zod's own modules. What it loads only when needed (the answer's schemas, starting a
// daemon) stays behind a lazy initialiser. No banner: the client imports no CommonJS, so this build
// also proves an ESM bundle of it needs no `require`.
await build({
  ...SHARED,
  entryPoints: { 'client/index': 'client/index.ts', 'client/llxprt/index': 'client/llxprt/index.ts', 'shared/index': 'shared/index.ts' },
  outdir: 'dist',
  allowOverwrite: true,
});
