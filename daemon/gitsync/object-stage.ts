import { promises as fs } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import path from 'node:path';
import { listDir, lstatOrNull, openRegularFile } from '../os/untrusted-files.js';
import type { HexLength } from './ref-names.js';
import { SyncBound } from './sync-bound.js';

/**
 * The daemon's private staging repository for one git dir of the sandbox: a bare repository
 * nothing mounts, whose alternates name the host's object store, into which the sandbox's finished
 * object files are linked (or copied) without following anything the sandbox planted. The host's
 * git fetches from it; it is never run with the sandbox's git dir as its repository, so a
 * `commondir`, `config`, symbolic link or FIFO planted there never reaches it.
 */

/** Past these the sandbox's objects are not staged: the sessions end (fail closed). */
export const MAX_LOOSE_OBJECTS = 250_000;
export const MAX_PACKS = 2_000;
/** git refuses objects larger than this by default on a fetch (`transfer.maxObjectSize` unset); a bound on one file. */
const MAX_OBJECT_FILE_BYTES = 64 * 1024 * 1024 * 1024;

const FANOUT = /^[0-9a-f]{2}$/;

/** Creates the staging repository if it is not there. */
export async function ensureStage(dir: string, hostObjects: string, hexLength: HexLength): Promise<void> {
  if ((await lstatOrNull(path.join(dir, 'HEAD')))?.isFile() === true) return;
  for (const sub of ['objects/info', 'objects/pack', 'refs/heads', 'refs/tags']) await fs.mkdir(path.join(dir, sub), { recursive: true, mode: 0o700 });
  const core = hexLength === 64 ? '[core]\n\trepositoryformatversion = 1\n\tbare = true\n[extensions]\n\tobjectFormat = sha256\n' : '[core]\n\trepositoryformatversion = 0\n\tbare = true\n';
  await fs.writeFile(path.join(dir, 'config'), `${core}[uploadpack]\n\tallowAnySHA1InWant = true\n`);
  await fs.writeFile(path.join(dir, 'objects', 'info', 'alternates'), `${hostObjects}\n`);
  await fs.writeFile(path.join(dir, 'HEAD'), 'ref: refs/heads/main\n');
}

/** Copies a regular file through its descriptor (never following a link), into place by rename. */
async function copyInto(source: string, target: string): Promise<boolean> {
  let opened: Awaited<ReturnType<typeof openRegularFile>>;
  try {
    opened = await openRegularFile(source, MAX_OBJECT_FILE_BYTES);
  } catch {
    return false;
  }
  const temp = `${target}.${process.pid}.tmp`;
  try {
    await pipeline(opened.handle.createReadStream({ autoClose: false }), (await fs.open(temp, 'wx', 0o444)).createWriteStream());
    await fs.rename(temp, target);
    return true;
  } catch {
    await fs.rm(temp, { force: true });
    return false;
  } finally {
    await opened.handle.close();
  }
}

/**
 * One finished object file into the stage: a hard link when the daemon may make one (checked
 * afterwards to be the very regular file looked at: `link` does not follow a symbolic link on
 * Linux, and where it does the identity differs), else a copy through its descriptor.
 */
async function stageFile(source: string, target: string): Promise<void> {
  if ((await lstatOrNull(target)) !== null) return;
  const before = await lstatOrNull(source).catch(() => null);
  if (before?.isFile() !== true) return;
  try {
    await fs.link(source, target);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return;
    if (code === 'EPERM' || code === 'EXDEV' || code === 'EACCES' || code === 'EMLINK') {
      await copyInto(source, target);
      return;
    }
    if (code === 'ENOENT') return;
    throw error;
  }
  const after = await lstatOrNull(target);
  if (after?.isFile() !== true || after.ino !== before.ino || after.dev !== before.dev) await fs.rm(target, { force: true });
}

/**
 * Stages the sandbox's object files (loose objects and complete packs) not staged yet. Only names
 * git gives finished objects: a loose object's name is its id, a pack is staged with its index.
 */
export async function stageObjects(sandboxObjects: string, stage: string, hexLength: HexLength): Promise<void> {
  let loose = 0;
  const looseName = new RegExp(`^[0-9a-f]{${String(hexLength - 2)}}$`);
  for (const fanout of await listDir(sandboxObjects)) {
    if (!fanout.isDirectory() || !FANOUT.test(fanout.name)) continue;
    const names = (await listDir(path.join(sandboxObjects, fanout.name))).filter((entry) => entry.isFile() && looseName.test(entry.name));
    loose += names.length;
    if (loose > MAX_LOOSE_OBJECTS) throw new SyncBound(`the sandbox's git dir holds more than ${MAX_LOOSE_OBJECTS} loose objects (run \`git gc\` in the sandbox)`);
    if (names.length === 0) continue;
    await fs.mkdir(path.join(stage, 'objects', fanout.name), { recursive: true, mode: 0o700 });
    for (const entry of names) await stageFile(path.join(sandboxObjects, fanout.name, entry.name), path.join(stage, 'objects', fanout.name, entry.name));
  }
  const packName = new RegExp(`^pack-[0-9a-f]{${String(hexLength)}}\\.pack$`);
  const packDir = path.join(sandboxObjects, 'pack');
  const entries = await listDir(packDir);
  const packs = entries.filter((entry) => entry.isFile() && packName.test(entry.name));
  if (packs.length > MAX_PACKS) throw new SyncBound(`the sandbox's git dir holds more than ${MAX_PACKS} packs (run \`git gc\` in the sandbox)`);
  const names = new Set(entries.map((entry) => entry.name));
  for (const pack of packs) {
    const index = pack.name.replace(/\.pack$/, '.idx');
    // git renames the index into place after the pack: a pack without one is not finished.
    if (!names.has(index)) continue;
    const staged = path.join(stage, 'objects', 'pack', pack.name);
    await stageFile(path.join(packDir, pack.name), staged);
    if ((await lstatOrNull(staged)) !== null) await stageFile(path.join(packDir, index), path.join(stage, 'objects', 'pack', index));
  }
}
