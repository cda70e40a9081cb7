// Bundles the `sandboxd` command into dist/bin: a small entry, and one self-contained bundle per
// command module (client/cli/entries/*), so a start reads two files instead of hundreds of
// node_modules or a graph of shared chunks. Each process loads one command bundle, so
// what they share (commander, zod) is never loaded twice. The library entries (`sandboxd/client`,
// `sandboxd/llxprt`, `sandboxd/shared`) are one file each too (see the end), so the package needs
// no runtime dependency: installing it fetches nothing and works offline.
import { build } from 'esbuild';
import { chmodSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import path from 'node:path';
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
 * a daemon does); fastify's server requires https, http2 and dns at its top for servers the
 * daemon never makes (TLS, HTTP/2, a host to look up), and https alone loads TLS. Their exports are
 * plain functions, classes and constants, so an object of getters stands in for each.
 */
const LAZY_BUILTINS = new Set(['node:child_process', 'node:fs/promises', 'node:net', 'node:os', 'node:https', 'node:http2', 'node:dns']);

function lazyBuiltin(name) {
  const getters = Object.keys(process.getBuiltinModule(name)).map((key) => `get ${key}() { return load().${key}; }`);
  return `let loaded;\nconst load = () => (loaded ??= process.getBuiltinModule(${JSON.stringify(name)}));\nmodule.exports = { ${getters.join(', ')} };`;
}

/**
 * fastify requires its JSON-schema compilers (ajv, fast-json-stringify) only when no compiler is
 * given; the daemon gives its own (http/server.ts: routes validate with zod), so they never run.
 * Bundled, they are a third of the daemon's bundle, which every start parses: each is left out,
 * and one that is required after all fails loudly instead of compiling anything.
 */
const UNUSED_MODULES = /^@fastify\/(ajv-compiler|fast-json-stringify-compiler)$/;
const leaveOutUnused = {
  name: 'leave-out-unused',
  setup(build) {
    build.onResolve({ filter: UNUSED_MODULES }, (args) => ({ path: args.path, namespace: 'unused' }));
    build.onLoad({ filter: /.*/, namespace: 'unused' }, (args) => ({
      contents: `module.exports = () => { throw new Error(${JSON.stringify(`${args.path} is left out of this bundle (scripts/bundle.js); give fastify a compiler of its own`)}); };`,
      loader: 'js',
    }));
  },
};

/**
 * fastify's plugin checks require semver as they load, and call it only for a plugin that names
 * the fastify versions it needs (the daemon registers none): semver's dozens of regular
 * expressions are built only when a check calls it, not at every start.
 */
const lazySemver = {
  name: 'lazy-semver',
  setup(build) {
    build.onResolve({ filter: /^semver$/ }, (args) => (args.importer.endsWith(path.join('fastify', 'lib', 'plugin-utils.js')) ? { path: `${args.importer}#lazy`, namespace: 'lazy-semver' } : undefined));
    build.onLoad({ filter: /.*/, namespace: 'lazy-semver' }, (args) => ({
      contents: `let loaded;\nconst load = () => (loaded ??= require('semver'));\nmodule.exports = { gt: (...a) => load().gt(...a), coerce: (...a) => load().coerce(...a), satisfies: (...a) => load().satisfies(...a) };`,
      resolveDir: path.dirname(args.path),
      loader: 'js',
    }));
  },
};

const ENTRIES = 'client/cli/entries';
/** The daemon's bundle is CommonJS: the entry runs it through vm.Script with V8's code cache (client/cli/code-cache.ts). */
const DAEMON_ENTRY = 'daemon.ts';
const entryPoints = {
  sandboxd: 'client/cli/bin.ts',
  ...Object.fromEntries(
    readdirSync(ENTRIES)
      .filter((name) => name.endsWith('.ts') && name !== DAEMON_ENTRY)
      .map((name) => [`entries/${name.slice(0, -3)}`, `${ENTRIES}/${name}`]),
  ),
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
  plugins: [builtinsWithoutFacade, leaveOutUnused, lazySemver],
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
await build({
  ...SHARED,
  entryPoints: { 'entries/daemon': `${ENTRIES}/${DAEMON_ENTRY}` },
  outdir: OUT,
  format: 'cjs',
  outExtension: { '.js': '.cjs' },
  // The one ESM-only value the daemon reads (os/package-files.ts finds the package from it).
  define: { 'import.meta.url': '__sandboxdModuleUrl' },
  banner: { js: "var __sandboxdModuleUrl = require('node:url').pathToFileURL(__filename).href;" },
});

/** The files an entry loads when it is imported: its static imports, followed from the entry. */
async function eagerFiles(source) {
  const { metafile } = await build({ ...SHARED, entryPoints: [source], outdir: 'dist', write: false, metafile: true, splitting: true });
  const eager = new Set();
  const visit = (file) => {
    if (eager.has(file) || metafile.inputs[file] === undefined) return;
    eager.add(file);
    for (const imported of metafile.inputs[file].imports) if (imported.kind === 'import-statement' || imported.kind === 'require-call') visit(imported.path);
  };
  visit(source);
  return [...eager].filter((file) => !file.startsWith('builtin:') && !file.startsWith('node_modules/'));
}

/**
 * Every module an entry loads when it is imported goes into one chunk: each file the entry imports
 * lazily also imports all of them (side-effect imports added as it is loaded). esbuild puts a module in
 * the chunk of the entries that reach it, so without this the eager modules scatter over as many
 * chunks as there are mixes of lazy entries using them, and each file costs an import its own
 * resolve, read and compile.
 */
function oneEagerChunk(eager) {
  const imports = eager.map((file) => `import ${JSON.stringify(path.resolve(file))};`).join('\n');
  return {
    name: 'one-eager-chunk',
    setup(bundle) {
      const lazy = new Set();
      bundle.onResolve({ filter: /^\./ }, (args) => {
        if (args.kind === 'dynamic-import') lazy.add(path.resolve(args.resolveDir, args.path.replace(/\.js$/, '.ts')));
        return undefined;
      });
      bundle.onLoad({ filter: /\.ts$/ }, (args) => (lazy.has(args.path) ? { contents: `${imports}\n${readFileSync(args.path, 'utf8')}`, loader: 'ts' } : undefined));
    },
  };
}

// The library entries replace tsc's dist/client/index.js, dist/client/llxprt/index.js and
// dist/shared/index.js (their types are scripts/declarations.js's). `sandboxd/llxprt` is imported
// by llxprt on every sandbox launch: what a launch against a running daemon runs is the entry and
// one chunk, and everything else (starting a daemon, an error's schema and zod with it) is a chunk
// of its own, loaded when first needed. No banner: the client imports no CommonJS, so this build
// also proves an ESM bundle of it needs no `require`.
const LIBRARY = [
  ['client/index', 'client/index.ts'],
  ['client/llxprt/index', 'client/llxprt/index.ts'],
  ['shared/index', 'shared/index.ts'],
];
for (const [entry] of LIBRARY) rmSync(`dist/${path.dirname(entry)}/chunks`, { recursive: true, force: true });
for (const [entry, source] of LIBRARY) {
  await build({
    ...SHARED,
    plugins: [...SHARED.plugins, oneEagerChunk(await eagerFiles(source))],
    entryPoints: { [entry]: source },
    outdir: 'dist',
    splitting: true,
    chunkNames: `${path.dirname(entry)}/chunks/[name]-[hash]`,
    allowOverwrite: true,
  });
}
