// Writes the package's type declarations into dist/types: tsc's declarations of the library
// entries (`sandboxd/client`, `sandboxd/llxprt`, `sandboxd/shared`) and of what they reach, with
// every type that comes from a zod schema written out as the plain type it is, and every schema
// described as a ContractSchema of that type (shared/contracts/contract-schema.ts). So the
// declarations a program reads stand alone: it needs no zod, and its own zod, of any version, is
// never asked to match the package's. The build fails on anything of zod's it cannot write out.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import process from 'node:process';
import ts from 'typescript';

const ENTRIES = ['client/index.ts', 'client/llxprt/index.ts', 'shared/index.ts'];
const OUT = 'dist/types';
const CONTRACT_SCHEMA = 'shared/contracts/contract-schema.ts';
/** Values of a zod type that is no schema, and the plain type each is published as. */
const PUBLISHED_AS = { ENGLISH: 'ContractParseOptions' };

const isZod = (specifier) => specifier === 'zod' || specifier.startsWith('zod/');

function compilerOptions() {
  const parsed = ts.getParsedCommandLineOfConfigFile('tsconfig.build.json', {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: (diagnostic) => fail(diagnostic.messageText) });
  return { ...parsed.options, noEmit: false, declaration: true, emitDeclarationOnly: true, declarationMap: false, sourceMap: false, outDir: OUT, rootDir: '.' };
}

function fail(message) {
  throw new Error(`scripts/declarations.js: ${typeof message === 'string' ? message : JSON.stringify(message)}`);
}

const program = ts.createProgram({ rootNames: ENTRIES, options: compilerOptions() });
const checker = program.getTypeChecker();
const printer = ts.createPrinter();
/** Written out whole: no `...`, no reference to a type the reader cannot see. */
const WRITE_OUT = ts.NodeBuilderFlags.NoTruncation | ts.NodeBuilderFlags.InTypeAlias | ts.NodeBuilderFlags.UseStructuralFallback | ts.NodeBuilderFlags.MultilineObjectLiterals | ts.NodeBuilderFlags.IgnoreErrors;

function typeNode(type) {
  const node = checker.typeToTypeNode(type, undefined, WRITE_OUT);
  if (node === undefined) fail(`cannot write out ${checker.typeToString(type)}`);
  return node;
}

function propertyType(type, name) {
  const symbol = checker.getPropertyOfType(type, name);
  return symbol === undefined ? undefined : checker.getTypeOfSymbol(symbol);
}

/** The output type of a zod schema's type, or undefined when `type` is no schema. */
function schemaOutput(type) {
  const internals = propertyType(type, '_zod');
  return internals === undefined ? undefined : propertyType(internals, 'output');
}

/**
 * `ContractSchema<T>`: T by name when the schema's file declares a type of the schema's own name
 * that is the same type (`export type ContainerUser = z.infer<typeof ContainerUser>`), else
 * written out.
 */
function contractSchema(output, name, sourceFile) {
  const alias = name === undefined ? undefined : sourceFile.statements.find((statement) => ts.isTypeAliasDeclaration(statement) && statement.name.text === name);
  const aliasType = alias === undefined ? undefined : checker.getDeclaredTypeOfSymbol(checker.getSymbolAtLocation(alias.name));
  const same = aliasType !== undefined && checker.isTypeAssignableTo(output, aliasType) && checker.isTypeAssignableTo(aliasType, output);
  return ts.factory.createTypeReferenceNode('ContractSchema', [same ? ts.factory.createTypeReferenceNode(name) : typeNode(output)]);
}

/** A zod-typed value's published type: a ContractSchema, a function making one, or PUBLISHED_AS. */
function publishedValueType(declaration, sourceFile) {
  const name = declaration.name.getText(sourceFile);
  if (Object.hasOwn(PUBLISHED_AS, name)) return ts.factory.createTypeReferenceNode(PUBLISHED_AS[name]);
  const type = checker.getTypeAtLocation(declaration.name);
  const output = schemaOutput(type);
  if (output !== undefined) return contractSchema(output, name, sourceFile);
  const [signature, ...others] = type.getCallSignatures();
  const returned = signature === undefined ? undefined : schemaOutput(signature.getReturnType());
  if (signature === undefined || others.length > 0 || returned === undefined) fail(`${name} in ${sourceFile.fileName} has a zod type that is no schema: add it to PUBLISHED_AS`);
  const parameters = signature.getParameters().map((parameter) =>
    ts.factory.createParameterDeclaration(undefined, undefined, parameter.getName(), undefined, typeNode(checker.getTypeOfSymbol(parameter))),
  );
  return ts.factory.createFunctionTypeNode(undefined, parameters, contractSchema(returned, undefined, sourceFile));
}

/** Declaration files (by output path) with zod's types left in, and why. */
const unwritable = new Map();
const outputOf = (source) => path.join(OUT, path.relative(process.cwd(), source).replace(/\.ts$/, '.d.ts'));

/** Rewrites one file's declarations; `names` are the zod namespaces it imported (`z`). */
function rewriteStatement(statement, names, sourceFile, used) {
  const text = printer.printNode(ts.EmitHint.Unspecified, statement, sourceFile);
  const mentionsZod = names.some((name) => new RegExp(`\\b${name}\\.`).test(text)) || /import\("zod[/"]/.test(text);
  if (!mentionsZod) return statement;
  const original = ts.getOriginalNode(statement);
  if (ts.isTypeAliasDeclaration(statement) && ts.isTypeAliasDeclaration(original)) {
    const type = checker.getDeclaredTypeOfSymbol(checker.getSymbolAtLocation(original.name));
    return ts.factory.updateTypeAliasDeclaration(statement, statement.modifiers, statement.name, statement.typeParameters, typeNode(type));
  }
  if (ts.isVariableStatement(statement) && ts.isVariableStatement(original)) {
    used.add('ContractSchema');
    const declarations = statement.declarationList.declarations.map((declaration, index) => {
      const source = original.declarationList.declarations[index];
      const type = publishedValueType(source, source.getSourceFile());
      if (ts.isTypeReferenceNode(type) && ts.isIdentifier(type.typeName) && type.typeName.text !== 'ContractSchema') used.add(type.typeName.text);
      return ts.factory.updateVariableDeclaration(declaration, declaration.name, declaration.exclamationToken, type, declaration.initializer);
    });
    return ts.factory.updateVariableStatement(statement, statement.modifiers, ts.factory.updateVariableDeclarationList(statement.declarationList, declarations));
  }
  // Fatal only if the file is published: prune() decides.
  unwritable.set(outputOf(sourceFile.fileName), `cannot write out zod's types: ${text.slice(0, 300)}`);
  return statement;
}

/** The declaration transformer: zod's imports go, zod's types are written out. */
const writeOutZod = () => (sourceFile) => {
  if (!ts.isSourceFile(sourceFile)) return sourceFile;
  const names = [];
  const kept = sourceFile.statements.filter((statement) => {
    if (!ts.isImportDeclaration(statement) || !ts.isStringLiteral(statement.moduleSpecifier) || !isZod(statement.moduleSpecifier.text)) return true;
    const bindings = statement.importClause?.namedBindings;
    if (bindings !== undefined && ts.isNamespaceImport(bindings)) names.push(bindings.name.text);
    else if (statement.importClause?.name !== undefined) names.push(statement.importClause.name.text);
    return false;
  });
  const used = new Set();
  const statements = kept.map((statement) => rewriteStatement(statement, names, sourceFile, used));
  if (used.size === 0) return ts.factory.updateSourceFile(sourceFile, statements);
  const from = path.relative(path.dirname(path.resolve(sourceFile.fileName)), path.resolve(CONTRACT_SCHEMA)).replace(/\.ts$/, '.js');
  const specifier = from.startsWith('.') ? from : `./${from}`;
  const importDeclaration = ts.factory.createImportDeclaration(
    undefined,
    ts.factory.createImportClause(true, undefined, ts.factory.createNamedImports([...used].sort().map((name) => ts.factory.createImportSpecifier(false, undefined, ts.factory.createIdentifier(name))))),
    ts.factory.createStringLiteral(specifier),
  );
  return ts.factory.updateSourceFile(sourceFile, [importDeclaration, ...statements]);
};

/** The declaration files the entries reach, by their relative imports; everything else goes. */
function prune(written) {
  const reached = new Set();
  const visit = (file) => {
    if (reached.has(file)) return;
    if (!written.has(file)) fail(`${file} is imported by the declarations but was not written`);
    if (unwritable.has(file)) fail(`${file}: ${unwritable.get(file)}`);
    reached.add(file);
    const { importedFiles } = ts.preProcessFile(written.get(file), true, true);
    for (const { fileName } of importedFiles) {
      if (fileName.startsWith('.')) visit(path.join(path.dirname(file), fileName.replace(/\.js$/, '.d.ts')));
      else if (!fileName.startsWith('node:')) fail(`${file} imports ${fileName}: a published declaration may import only its own files and node's`);
    }
  };
  for (const entry of ENTRIES) visit(path.join(OUT, entry.replace(/\.ts$/, '.d.ts')));
  return reached;
}

rmSync(OUT, { recursive: true, force: true });
const written = new Map();
const emitted = program.emit(undefined, (file, text) => written.set(path.relative(process.cwd(), file), text), undefined, true, { afterDeclarations: [writeOutZod] });
const errors = ts.getPreEmitDiagnostics(program).concat(emitted.diagnostics).filter((diagnostic) => diagnostic.category === ts.DiagnosticCategory.Error);
if (errors.length > 0) fail(ts.formatDiagnostics(errors, { getCanonicalFileName: (name) => name, getCurrentDirectory: () => process.cwd(), getNewLine: () => '\n' }));
for (const file of prune(written)) {
  const text = written.get(file);
  if (/\bzod\b/.test(text.replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, ''))) fail(`${file} still names zod`);
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, text);
}
