import { chmodSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';
import { afterAll, describe, expect, it } from 'vitest';
import { Cleanup, ROOT, waitFor } from '../helpers.js';
import { createTestUser, labImageTar, packTarball } from '../lab/test-user.js';
import { lab, labMissing, podmanLab } from './lab.js';

const cleanup = new Cleanup();
afterAll(() => cleanup.run());

/** Nothing but loopback answers here anyway; a bogus registry and offline mode make any fetch fail. */
const OFFLINE = { npm_config_offline: 'true', npm_config_registry: 'http://127.0.0.1:9/', npm_config_update_notifier: 'false', npm_config_fund: 'false', npm_config_audit: 'false' };

/** A fresh directory, removed at the end, readable by every user. */
function scratch(prefix: string): string {
  const dir = mkdtempSync(`/tmp/${prefix}`);
  chmodSync(dir, 0o755);
  cleanup.add(() => {
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

/**
 * The package as a person installs it: the tarball `npm pack` makes, installed by a normal account
 * into a user prefix (no sudo), with no registry to fetch anything from, then the main job run
 * from that install against the lab's rootless podman and the user's own agent.
 */
describe.skipIf(labMissing)('the packed tarball, installed offline by a non-root user with a user prefix', () => {
  it('installs with no dependency to fetch, and `sandboxd run` from it forwards the agent', async () => {
    const { image } = podmanLab();
    const tarball = await packTarball(cleanup);
    const user = await createTestUser(cleanup, { tar: await labImageTar(lab.dir, cleanup), name: image });

    const prefix = path.join(user.home, '.local');
    const nodeDir = path.dirname(process.execPath);
    const PATH = `${path.join(prefix, 'bin')}:${nodeDir}:/usr/local/bin:/usr/bin:/bin`;
    const asUser = (file: string, args: string[], env: Record<string, string> = {}) =>
      execa('setpriv', [`--reuid=${String(user.uid)}`, `--regid=${String(user.gid)}`, '--init-groups', file, ...args], {
        env: { HOME: user.home, USER: user.name, LOGNAME: user.name, PATH, ...env },
        extendEnv: false,
        reject: false,
        timeout: 120_000,
        cwd: user.home,
      });

    const installed = await asUser('npm', ['install', '--global', '--prefix', prefix, tarball], OFFLINE);
    expect({ code: installed.exitCode, stderr: installed.stderr }).toMatchObject({ code: 0 });
    expect(installed.stdout).toContain('added 1 package');
    expect(readdirSync(path.join(prefix, 'lib/node_modules/sandboxd'))).not.toContain('node_modules');

    // The user's own agent with a key, as a login shell has.
    const agentSocket = path.join(user.home, 'agent.sock');
    const key = path.join(user.home, 'id_ed25519');
    expect((await asUser('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'packaged@sandboxd', '-f', key])).exitCode).toBe(0);
    expect((await asUser('ssh-agent', ['-a', agentSocket])).exitCode).toBe(0);
    expect((await asUser('ssh-add', [key], { SSH_AUTH_SOCK: agentSocket })).exitCode).toBe(0);

    const run = await asUser('sandboxd', ['run', '--engine', 'podman', '--no-workdir', '--', '--rm', image, 'ssh-add', '-l'], { SSH_AUTH_SOCK: agentSocket });
    expect({ code: run.exitCode, stderr: run.stderr }).toEqual({ code: 0, stderr: '' });
    expect(run.stdout).toContain('packaged@sandboxd');
    // The daemon it auto-started runs from the installed package, not from this clone.
    const status = await asUser('sandboxd', ['status', '--json']);
    expect(status.exitCode).toBe(0);
    const { pid } = JSON.parse(status.stdout) as { pid: number };
    expect(readFileSync(`/proc/${String(pid)}/cmdline`, 'utf8').split('\0')).toContain(path.join(prefix, 'bin/sandboxd'));
    // Its look worker's program shipped in the package and started (at the daemon's first quiet
    // moment, at most ten seconds after the start): the daemon says so once it is ready.
    await waitFor(async () => (await asUser('sandboxd', ['logs', '--json'])).stdout.includes('file looks run on the look worker') || null, "the packed daemon's look worker", 30_000, 1000);
    await asUser('sandboxd', ['stop']);
  });
});

/**
 * A program's own project, as llxprt's packages/cli is one: `npm install` of the tarball with
 * npm's default resolution (no --legacy-peer-deps, no --force), offline, beside the zod 3 llxprt
 * depends on and in a project with no zod; then its TypeScript reads the package's declarations
 * with nothing skipped, and its runtime imports the entries.
 */
describe('the packed tarball in a program\'s own project, beside zod 3 or no zod', () => {
  /** A program that uses the three entries the way a TypeScript caller would. */
  const CONSUMER = `
import { forwardThroughSandboxd, type Forwarded, type AdapterLog } from 'sandboxd/llxprt';
import { acquireSession, applyPlan, type Session, type SessionInfo } from 'sandboxd/client';
import { AcquireResponse, ENGLISH, type ContractSchema, type Plan } from 'sandboxd/shared';

const log: AdapterLog = { warn: (line: string) => process.stderr.write(line), debug: () => undefined };
export const launch: Promise<Forwarded> = forwardThroughSandboxd({ command: 'podman' }, ['run'], { setUidGid: true, credentialSocket: '/tmp/proxy.sock', log });
export async function session(): Promise<string[]> {
  const held: Session = await acquireSession({ engine: 'podman', label: 'mine' });
  const info: SessionInfo = held.info;
  return applyPlan(['run', info.id], held.plan).args;
}
const schema: ContractSchema<{ plan: Plan }> = AcquireResponse;
export const checked: boolean = schema.safeParse({}, ENGLISH).success;
`;
  const TSCONFIG = {
    compilerOptions: {
      target: 'ES2022',
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      strict: true,
      noEmit: true,
      skipLibCheck: false,
      types: ['node'],
      typeRoots: [path.join(ROOT, 'node_modules/@types')],
    },
    files: ['consumer.ts'],
  };

  /** zod 3.25.76 as npm sees it (name and version): what llxprt depends on; npm's resolution reads no more. */
  async function zod3Tarball(): Promise<string> {
    const dir = scratch('sbx-zod3-');
    const source = path.join(dir, 'zod');
    mkdirSync(source);
    writeFileSync(path.join(source, 'package.json'), JSON.stringify({ name: 'zod', version: '3.25.76', main: 'index.js' }));
    writeFileSync(path.join(source, 'index.js'), 'module.exports = { version: 3 };\n');
    await execa('npm', ['pack', '--silent', '--pack-destination', dir], { cwd: source, timeout: 60_000 });
    return path.join(dir, 'zod-3.25.76.tgz');
  }

  const npm = (args: string[], cwd: string) => execa('npm', args, { cwd, env: { ...process.env, ...OFFLINE, npm_config_cache: path.join(cwd, '.npm-cache') }, reject: false, timeout: 120_000 });

  it.each(['zod 3', 'no zod'] as const)('beside %s: installs with npm\'s default resolution, reads its declarations and runs', async (beside) => {
    const tarball = await packTarball(cleanup);
    const project = scratch('sbx-project-');
    writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'a-program', version: '1.0.0', type: 'module', private: true }));
    if (beside === 'zod 3') expect((await npm(['install', await zod3Tarball()], project)).exitCode).toBe(0);

    const installed = await npm(['install', tarball], project);
    expect({ code: installed.exitCode, stderr: installed.stderr }).toMatchObject({ code: 0 });
    expect(installed.stderr).not.toContain('ERESOLVE');
    const dependencies = (JSON.parse(readFileSync(path.join(project, 'package.json'), 'utf8')) as { dependencies: Record<string, string> }).dependencies;
    expect(Object.keys(dependencies).sort()).toEqual(beside === 'zod 3' ? ['sandboxd', 'zod'] : ['sandboxd']);
    const modules = readdirSync(path.join(project, 'node_modules')).filter((name) => !name.startsWith('.'));
    expect(modules.sort()).toEqual(beside === 'zod 3' ? ['sandboxd', 'zod'] : ['sandboxd']);
    if (beside === 'zod 3') expect((JSON.parse(readFileSync(path.join(project, 'node_modules/zod/package.json'), 'utf8')) as { version: string }).version).toBe('3.25.76');

    // The program's compiler reads every published declaration (skipLibCheck off) and finds no zod.
    writeFileSync(path.join(project, 'consumer.ts'), CONSUMER);
    writeFileSync(path.join(project, 'tsconfig.json'), JSON.stringify(TSCONFIG));
    const tsc = await execa(process.execPath, [path.join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', project], { cwd: project, reject: false, timeout: 120_000 });
    expect({ code: tsc.exitCode, out: tsc.stdout }).toEqual({ code: 0, out: '' });

    // Its runtime loads each entry from the installed package.
    const script = "const [l, c, s] = await Promise.all([import('sandboxd/llxprt'), import('sandboxd/client'), import('sandboxd/shared')]); console.log(typeof l.forwardThroughSandboxd, typeof c.acquireSession, s.AcquireResponse.safeParse({}).success)";
    const run = await execa(process.execPath, ['--input-type=module', '-e', script], { cwd: project, reject: false, timeout: 30_000 });
    expect({ code: run.exitCode, stdout: run.stdout, stderr: run.stderr }).toEqual({ code: 0, stdout: 'function function false', stderr: '' });
  });
});
