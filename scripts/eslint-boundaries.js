// The layout's promises, checked by the linter (rule `sandboxd/boundaries`): no two folders of
// shared/, daemon/ and client/ import each other (directly or round a loop), no two modules do,
// shared/ imports only itself, the daemon never imports the client, and the client reaches the
// daemon only through CLIENT_SURFACE. A file is reported at each import that breaks one.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

/**
 * What client/ may import from daemon/: the OS helpers both sides use, and the few daemon modules
 * a command runs itself (the daemon's entry for `sandboxd daemon`; the agent socket and Podman
 * connection checks of `doctor`, and the image of its test container). Everything else of the
 * daemon is reached over its HTTP API.
 */
export const CLIENT_SURFACE = [
  'daemon/os/',
  'daemon/main.ts',
  'daemon/bridges/relay-image.ts',
  'daemon/plan/agent-socket.ts',
  'daemon/podman/connections.ts',
  'daemon/podman/discover.ts',
  'daemon/podman/ssh-command.ts',
];

const ROOTS = ['shared', 'daemon', 'client'];

/**
 * The package's faces (package.json `exports`) re-export what lies below them: they stand outside
 * the folder they sit in, so their imports are no folder's dependency (module loops still count).
 */
const FACES = new Set(['shared/index.ts', 'client/index.ts']);

function sourceFiles(root, dir) {
  let entries;
  try {
    entries = readdirSync(path.join(root, dir), { withFileTypes: true });
  } catch {
    return [];
  }
  return entries.flatMap((entry) => {
    const rel = `${dir}/${entry.name}`;
    if (entry.isDirectory()) return sourceFiles(root, rel);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts') ? [rel] : [];
  });
}

/** Per file: its mtime and relative imports, so a long-lived linter re-reads only what changed. */
const importsCache = new Map();

function importsOf(root, file) {
  const full = path.join(root, file);
  const mtime = statSync(full).mtimeMs;
  const cached = importsCache.get(full);
  if (cached?.mtime === mtime) return cached.targets;
  // preProcessFile sees every form: import, import type, export … from, import().
  const { importedFiles } = ts.preProcessFile(readFileSync(full, 'utf8'), true, true);
  const targets = [
    ...new Set(
      importedFiles
        .map((imported) => imported.fileName)
        .filter((name) => name.startsWith('.'))
        .map((name) => path.posix.normalize(path.posix.join(path.posix.dirname(file), name.replace(/\.js$/, '.ts')))),
    ),
  ];
  importsCache.set(full, { mtime, targets });
  return targets;
}

/** Repository-relative file → the repository-relative files it imports. */
export function readImportGraph(root) {
  return new Map(ROOTS.flatMap((dir) => sourceFiles(root, dir)).map((file) => [file, importsOf(root, file)]));
}

const folderOf = (file) => path.posix.dirname(file);
const folderOfModule = (file) => (FACES.has(file) ? undefined : folderOf(file));

/** Why importing `target` from `file` crosses a boundary, or null. */
export function boundaryViolation(file, target) {
  const top = target.split('/')[0];
  if (file.startsWith('shared/') && top !== 'shared') return 'shared/ imports only shared/';
  if (file.startsWith('daemon/') && top === 'client') return 'the daemon never imports the client';
  if (file.startsWith('client/') && top === 'daemon' && !CLIENT_SURFACE.some((allowed) => target === allowed || (allowed.endsWith('/') && target.startsWith(allowed)))) {
    return 'the client reaches the daemon only through CLIENT_SURFACE (scripts/eslint-boundaries.js)';
  }
  return null;
}

/** Node → the id of its strongly connected component (Tarjan), for components of more than one node. */
function loops(edges) {
  let counter = 0;
  const index = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const component = new Map();
  const visit = (node) => {
    index.set(node, counter);
    low.set(node, counter);
    counter += 1;
    stack.push(node);
    onStack.add(node);
    for (const next of edges.get(node) ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node), low.get(next)));
      } else if (onStack.has(next)) {
        low.set(node, Math.min(low.get(node), index.get(next)));
      }
    }
    if (low.get(node) !== index.get(node)) return;
    const members = [];
    let member;
    do {
      member = stack.pop();
      onStack.delete(member);
      members.push(member);
    } while (member !== node);
    members.sort();
    if (members.length > 1) for (const m of members) component.set(m, members);
  };
  for (const node of edges.keys()) if (!index.has(node)) visit(node);
  return component;
}

function edgesBy(graph, name) {
  const edges = new Map();
  for (const [file, targets] of graph) {
    const from = name(file);
    if (from === undefined) continue;
    if (!edges.has(from)) edges.set(from, new Set());
    for (const target of targets) {
      const to = name(target);
      if (to !== undefined && to !== from) edges.get(from).add(to);
    }
  }
  return edges;
}

/** Every import of the tree that breaks a promise, as { file, target, reason }. */
export function violations(graph) {
  const folderLoops = loops(edgesBy(graph, folderOfModule));
  const fileLoops = loops(edgesBy(graph, (file) => file));
  const found = [];
  for (const [file, targets] of graph) {
    for (const target of targets) {
      const boundary = boundaryViolation(file, target);
      if (boundary !== null) found.push({ file, target, reason: boundary });
      const folders = FACES.has(file) ? undefined : folderLoops.get(folderOf(file));
      if (folders !== undefined && folderOf(target) !== folderOf(file) && folders.includes(folderOf(target))) {
        found.push({ file, target, reason: `closes a loop between the folders ${folders.join(', ')}` });
      }
      const files = fileLoops.get(file);
      if (files !== undefined && files.includes(target)) found.push({ file, target, reason: `closes a loop between the modules ${files.join(', ')}` });
    }
  }
  return found;
}

export const boundariesPlugin = {
  rules: {
    boundaries: {
      meta: {
        type: 'problem',
        docs: { description: 'Folders and modules import each other in one direction; the client reaches the daemon only through its surface.' },
        schema: [{ type: 'object', properties: { root: { type: 'string' } }, additionalProperties: false }],
      },
      create(context) {
        const root = context.options[0]?.root ?? context.cwd;
        const file = path.relative(root, context.filename).split(path.sep).join('/');
        if (!ROOTS.some((dir) => file.startsWith(`${dir}/`))) return {};
        return {
          Program(program) {
            const resolve = (specifier) => path.posix.normalize(path.posix.join(path.posix.dirname(file), specifier.replace(/\.js$/, '.ts')));
            const statementFor = (target) => program.body.find((statement) => typeof statement.source?.value === 'string' && resolve(statement.source.value) === target) ?? program;
            for (const found of violations(readImportGraph(root))) {
              if (found.file === file) context.report({ node: statementFor(found.target), message: `imports ${found.target}: ${found.reason}` });
            }
          },
        };
      },
    },
  },
};
