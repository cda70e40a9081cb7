// Bundles the `sandboxd` command into dist/bin: a small entry, and one self-contained bundle per
// command module (client/cli/entries/*), so a start reads two files instead of hundreds of
// node_modules or a graph of shared chunks. Each process loads one command bundle, so
// what they share (commander, zod) is never loaded twice. The library entries (`sandboxd/client`,
// `sandboxd/llxprt`, `sandboxd/shared`) are one file each too (see the end), so the package needs
// no runtime dependency: installing it fetches nothing and works offline.
import { build } from 'esbuild';
import { createHash } from 'node:crypto';
import { chmodSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
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
 * The library entries' builtins, as ES modules: a library imports no CommonJS, and a CommonJS
 * stand-in costs every import of it a copy of all its exports (esbuild's __toESM: a getter per
 * export, hundreds on a launch). Each export is read from process.getBuiltinModule where it is
 * used: a value when the bundle is evaluated, a function, or an object of getters, on first use
 * where the module is loaded lazily (LAZY_BUILTINS) or the export itself is (node:fs's
 * `promises` loads fs/promises). What no code imports is left out by esbuild.
 */
const builtinsAsModules = {
  name: 'builtins-as-modules',
  setup(build) {
    build.onResolve({ filter: /^node:/ }, (args) => ({ path: args.path, namespace: 'builtin-module' }));
    build.onLoad({ filter: /.*/, namespace: 'builtin-module' }, (args) => ({ contents: builtinModule(args.path), loader: 'js' }));
  },
};

const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;

function gettersOver(keys, source) {
  return keys.filter((key) => IDENTIFIER.test(key)).map((key) => `get ${key}() { return ${source}.${key}; }`).join(', ');
}

function builtinModule(name) {
  const real = process.getBuiltinModule(name);
  const lazy = LAZY_BUILTINS.has(name);
  const lines = [`let loaded;`, `const load = () => (loaded ??= process.getBuiltinModule(${JSON.stringify(name)}));`];
  lines.push(lazy ? `export default { ${gettersOver(Object.keys(real), 'load()')} };` : `export default /* @__PURE__ */ load();`);
  for (const key of Object.keys(real)) {
    if (!IDENTIFIER.test(key) || key === 'default') continue;
    const deferred = lazy || Object.getOwnPropertyDescriptor(real, key)?.get !== undefined;
    const value = real[key];
    if (deferred && typeof value === 'function') {
      lines.push(`export function ${key}(...args) { return new.target === undefined ? load().${key}(...args) : Reflect.construct(load().${key}, args, new.target); }`);
    } else if (deferred && typeof value === 'object' && value !== null) {
      lines.push(`export const ${key} = { ${gettersOver(Object.keys(value), `load().${key}`)} };`);
    } else lines.push(`export const ${key} = /* @__PURE__ */ (() => load().${key})();`);
  }
  return lines.join('\n');
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
/** The daemon's and run's bundles are CommonJS: the entry runs them through vm.Script with V8's code cache (client/cli/code-cache.ts). */
const CJS_ENTRIES = ['daemon.ts', 'run.ts'];
const entryPoints = {
  sandboxd: 'client/cli/bin.ts',
  ...Object.fromEntries(
    readdirSync(ENTRIES)
      .filter((name) => name.endsWith('.ts') && !CJS_ENTRIES.includes(name))
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
  entryPoints: Object.fromEntries(CJS_ENTRIES.map((name) => [`entries/${name.slice(0, -3)}`, `${ENTRIES}/${name}`])),
  outdir: OUT,
  format: 'cjs',
  outExtension: { '.js': '.cjs' },
  // The one ESM-only value the bundles read (os/package-files.ts finds the package from it).
  define: { 'import.meta.url': '__sandboxdModuleUrl' },
  banner: { js: "var __sandboxdModuleUrl = require('node:url').pathToFileURL(__filename).href;" },
});
// The daemon's look worker's program (daemon/os/look-worker.ts starts it from dist/bin/entries):
// a file of its own, as a worker thread loads one; node's builtins only, read through
// process.getBuiltinModule as the daemon's are.
await build({
  ...SHARED,
  entryPoints: { 'entries/look-thread': 'daemon/looks/look-thread.ts' },
  outdir: OUT,
  format: 'cjs',
  outExtension: { '.js': '.cjs' },
});
// Each CommonJS bundle ends with the SHA-256 of the text before that line: the entry names the
// bundle's code cache by it (client/cli/code-cache.ts) instead of loading node:crypto on every start.
for (const name of CJS_ENTRIES) {
  const file = `${OUT}/entries/${name.slice(0, -3)}.cjs`;
  const text = readFileSync(file, 'utf8');
  writeFileSync(file, `${text}// sandboxd-sha256 ${createHash('sha256').update(text).digest('hex')}\n`);
}

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
/** The registry chunk, beside the lazy chunks: what they import from the entry's code, once the entry handed it over. */
const REGISTRY = 'entry-values.js';
const REGISTRY_TEXT = 'export let values;export function provide(given){values??=given}\n';
/** The names the entry's text gains (the build fails if its code has them already). */
const LOADER = '__sandboxdLoad';
const VALUES = '__sandboxdEntryValues';

const escapeRegExp = (text) => text.replaceAll(/[$.*+?^()[\]{}|\\]/g, '\\$&');

const LIBRARY = [
  ['client/index', 'client/index.ts'],
  ['client/llxprt/index', 'client/llxprt/index.ts'],
  ['shared/index', 'shared/index.ts'],
];
for (const [entry] of LIBRARY) rmSync(`dist/${path.dirname(entry)}/chunks`, { recursive: true, force: true });
for (const [entry, source] of LIBRARY) {
  await build({
    ...SHARED,
    plugins: [builtinsAsModules, leaveOutUnused, oneEagerChunk(await eagerFiles(source))],
    entryPoints: { [entry]: source },
    outdir: 'dist',
    splitting: true,
    chunkNames: `${path.dirname(entry)}/chunks/[name]-[hash]`,
    allowOverwrite: true,
  });
  eagerChunkIntoEntry(`dist/${entry}.js`);
}

/**
 * esbuild writes an entry that only re-exports its eager chunk, which the lazy chunks import too.
 * Importing the entry then resolves, reads, compiles and links two files where one would do: the
 * chunk's text becomes the entry's (its imports of lazy chunks pointed from the entry's directory),
 * and the entry exports only its own names (its declarations, scripts/declarations.js, name the
 * same). What the lazy chunks used from the eager chunk reaches them through a registry chunk
 * (REGISTRY) that the entry fills before it loads any of them: each of the entry's dynamic imports
 * goes through a loader that imports the registry and hands it the values. A lazy chunk reads them
 * when it is evaluated, which is after the entry was, so each must be final by then: a function,
 * a class, or a binding given its value where it is declared and never assigned again (checked
 * here; the build fails otherwise). An entry whose own code or whose several chunks esbuild left
 * beside it is kept as it is: moving one chunk into it could make a static import cycle run a
 * chunk before what it uses.
 */
/** `a,b as c` (esbuild's import and export lists) as [name, alias] pairs. */
function bindings(list) {
  return list.split(',').map((item) => {
    const [name, alias = name] = item.split(' as ');
    return [name, alias];
  });
}

/** Fails the build unless `local` keeps the value it has once the entry's text has run (see eagerChunkIntoEntry). */
function assertFinal(text, local, entryFile) {
  const name = escapeRegExp(local);
  const assignments = [...text.matchAll(new RegExp(`(?<![\\w$.])${name}\\s*(?:=(?![=>])|[-+*/%&|^]=|\\*\\*=|<<=|>>>?=|\\?\\?=|\\|\\|=|&&=|\\+\\+|--)|(?:\\+\\+|--)${name}(?![\\w$])`, 'g'))];
  const declaredAsCode = new RegExp(`(?:function\\*?|class)\\s+${name}(?![\\w$])`).test(text);
  const declaredWithValue = assignments.length === 1 && /(?:\b(?:var|let|const)\s+|,)$/.test(text.slice(0, assignments[0].index));
  if (declaredAsCode ? assignments.length > 0 : !declaredWithValue) {
    throw new Error(`${entryFile}: ${local}, which a lazy chunk imports, is not given its value once where it is declared; a lazy chunk would read a stale one`);
  }
}

function eagerChunkIntoEntry(entryFile) {
  const reexport = /^import\{([\w$,]+)\}from"\.\/chunks\/(chunk-[\w-]+\.js)";export\{([\w$,]+)\};\n\/\/# sourceMappingURL=[\w.-]+\.map\n$/.exec(readFileSync(entryFile, 'utf8'));
  if (reexport === null || reexport[1] !== reexport[3]) return;
  const own = new Set(reexport[1].split(','));
  const chunksDir = path.join(path.dirname(entryFile), 'chunks');
  const eager = reexport[2];
  const others = readdirSync(chunksDir).filter((name) => name.endsWith('.js') && name !== eager);
  if (others.includes(REGISTRY)) throw new Error(`${entryFile}: esbuild wrote a chunk named ${REGISTRY}`);
  const specifier = (name) => new RegExp(`(from|import|import\\()"\\./${escapeRegExp(name)}"`, 'g');
  const exportList = /export\{([^}]*)\};(\n\/\/# sourceMappingURL=[^\n]*\n)$/;
  let text = readFileSync(path.join(chunksDir, eager), 'utf8').replace(`//# sourceMappingURL=${eager}.map`, `//# sourceMappingURL=chunks/${eager}.map`);
  if (text.includes(LOADER) || text.includes(VALUES)) throw new Error(`${entryFile}: its code already names ${LOADER} or ${VALUES}`);
  for (const name of others) text = text.replace(specifier(name), `$1"./chunks/${name}"`);
  // exported name -> the entry's local name
  const locals = new Map(bindings(exportList.exec(text)?.[1] ?? '').map(([local, exported]) => [exported, local]));
  const missing = [...own].filter((name) => !locals.has(name));
  if (missing.length > 0) throw new Error(`${entryFile}: its eager chunk ${eager} does not export ${missing.join(', ')}`);

  // The lazy chunks' imports of the eager chunk, each becoming a read of the registry's values.
  const entryImport = new RegExp(`import\\{([^}]*)\\}from"\\./${escapeRegExp(eager)}";?`, 'g');
  const used = new Set();
  for (const name of others) {
    const file = path.join(chunksDir, name);
    const rewritten = readFileSync(file, 'utf8')
      .replace(entryImport, (_, list) => {
        const pairs = bindings(list);
        for (const [exported] of pairs) used.add(exported);
        return `import{values as ${VALUES}}from"./${REGISTRY}";var{${pairs.map(([exported, local]) => `${exported}:${local}`).join(',')}}=${VALUES};`;
      })
      // What imports the eager chunk for its effects alone imports the entry, which has run already.
      .replace(specifier(eager), `$1"../${path.basename(entryFile)}"`);
    writeFileSync(file, rewritten);
  }
  if (used.size > 0) {
    for (const exported of used) assertFinal(text, locals.get(exported), entryFile);
    const handed = [...used].map((exported) => `${exported}:${locals.get(exported)}`).join(',');
    text = text.replaceAll(/import\("\.\/chunks\/([\w.-]+)"\)/g, `${LOADER}(()=>import("./chunks/$1"))`);
    text = text.replace(exportList, (whole) => `function ${LOADER}(chunk){return import("./chunks/${REGISTRY}").then(registry=>(registry.provide({${handed}}),chunk()))}${whole}`);
    writeFileSync(path.join(chunksDir, REGISTRY), REGISTRY_TEXT);
  }
  text = text.replace(exportList, (_, __, map) => `export{${[...own].map((name) => `${locals.get(name)} as ${name}`).join(',')}};${map}`);
  writeFileSync(entryFile, text);
  rmSync(path.join(chunksDir, eager));
  // The entry's map was of the re-export; the chunk's map, left where its sources are relative to, is the entry's now.
  rmSync(`${entryFile}.map`, { force: true });
  const code = (file) => readFileSync(file, 'utf8').replace(/\n\/\/# sourceMappingURL=.*\n$/, '');
  const leftover = [entryFile, ...others.map((name) => path.join(chunksDir, name))].filter((file) => code(file).includes(eager));
  if (leftover.length > 0) throw new Error(`${leftover.join(', ')} still name ${eager}, which was moved into ${entryFile}`);
}
