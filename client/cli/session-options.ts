import { Option, type Command } from 'commander';
import type { Engine } from '../../shared/contracts/common.js';
import type { ContainerUser, HostSocketRequest, SshAgentSetting, SshBridgeSetting } from '../../shared/contracts/sessions.js';
import { ENGINES, SSH_AGENT_SETTINGS, SSH_BRIDGE_SETTINGS } from '../../shared/contracts/session-routes.js';
import { SandboxdError } from '../../shared/errors.js';
import { parseCredentialHosts } from '../../shared/git-credential-hosts.js';
import type { AcquireOptions } from '../session.js';
import { chooseEngine, systemProbes } from './engine-choice.js';

export interface SessionFlags {
  engine?: Engine;
  verbose?: boolean;
  sshAgent: SshAgentSetting;
  sshBridge?: SshBridgeSetting;
  connection?: string;
  containerUser?: string;
  containerHome?: string;
  label?: string;
  json?: boolean;
  workdir?: boolean;
  mount: string[];
  cloudCredentials?: boolean;
  passEnv: string[];
  gitHooks: 'readonly' | 'writable';
  gitConfig: 'readonly' | 'writable';
  allowUnprotectedGitPaths?: boolean;
  allowWideWorkdir?: boolean;
  socket: string[];
  gitCredentials: string[];
  harden?: boolean;
}

function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

export function addSessionOptions(command: Command): Command {
  return command
    .addOption(new Option('--engine <engine>', 'container engine (default: SANDBOXD_ENGINE, else the one installed; with both, the one that answers)').choices(ENGINES))
    .addOption(new Option('--ssh-agent <setting>', 'forward the SSH agent').choices(SSH_AGENT_SETTINGS).default('auto'))
    .addOption(new Option('--ssh-bridge <bridge>', 'how the agent reaches the container (default: SANDBOXD_SSH_BRIDGE or auto)').choices(SSH_BRIDGE_SETTINGS))
    .option('--connection <name>', 'Podman connection to tunnel into (default: CONTAINER_CONNECTION, then podman\'s default)')
    .option('--container-user <uid[:gid]>', 'the user the container runs as (default: `run`\'s --user, else 0:0)')
    .option('--container-home <dir>', 'that user\'s HOME in the container, for git < 2.32 (default /root for uid 0)')
    .option('--label <text>', 'name shown in `sandboxd sessions ls`', 'sandboxd-cli')
    .option('--mount <spec>', 'extra mount: path, path:ro|rw, src:dst, src:dst:ro|rw (read-only by default; repeatable)', collect, [])
    .option('--cloud-credentials', 'mount ~/.config/gcloud, ~/.aws and GOOGLE_APPLICATION_CREDENTIALS read-only')
    .option('--pass-env <name>', 'pass this variable from your environment into the container (repeatable)', collect, [])
    .addOption(new Option('--git-hooks <policy>', 'whether the sandbox may install hooks in its own git dir (they run only there)').choices(['readonly', 'writable']).default('readonly'))
    .addOption(new Option('--git-config <policy>', 'whether the sandbox may change its own copy of the repository config (the host\'s is never written)').choices(['readonly', 'writable']).default('readonly'))
    .option('--allow-unprotected-git-paths', 'run although a path your git config names cannot be held read-only in a writable mount (missing, or behind a symbolic link)')
    .option('--socket <name=path[:env]>', 'also bridge this host Unix socket; the container finds it in $ENV (repeatable)', collect, [])
    .option('--git-credentials <hosts>', 'git in the container may ask your host\'s credential helpers for these hosts\' https credentials, get only: HOST[:PORT][,…] (repeatable; default: SANDBOXD_GIT_CREDENTIALS)', collect, [])
    .option('--allow-wide-workdir', 'allow a workdir that is /, your home directory or one of its ancestors')
    .option('--harden', 'read-only root with a tmpfs /tmp, no capabilities, no-new-privileges, a pids limit (your run args win)')
    .option('-v, --verbose', 'say which engine was chosen and why')
    .option('--json', 'print JSON');
}

/** The engine of the session: `--engine`, `SANDBOXD_ENGINE` or the one there; `-v` says which. */
export async function sessionEngine(flags: SessionFlags): Promise<Engine> {
  const choice = await chooseEngine(flags.engine, process.env, systemProbes(process.env));
  if (flags.verbose === true) process.stderr.write(`sandboxd: engine ${choice.engine} (${choice.why})\n`);
  return choice.engine;
}

const NUMERIC_USER = /^(\d+)(?::(\d+))?$/;

/** `uid` or `uid:gid`; names cannot be resolved outside the image, so they give no user. */
export function numericUser(value: string, home: string | undefined): ContainerUser | undefined {
  const match = NUMERIC_USER.exec(value);
  if (match?.[1] === undefined) return undefined;
  const uid = Number(match[1]);
  const resolvedHome = home ?? (uid === 0 ? '/root' : undefined);
  return { uid, gid: Number(match[2] ?? match[1]), home: resolvedHome };
}

function parseUser(flags: SessionFlags): ContainerUser | undefined {
  if (flags.containerUser === undefined) {
    return flags.containerHome === undefined ? undefined : { uid: 0, gid: 0, home: flags.containerHome };
  }
  const user = numericUser(flags.containerUser, flags.containerHome);
  if (user === undefined) {
    throw new SandboxdError('USAGE', `--container-user must be uid or uid:gid, got "${flags.containerUser}"`, {
      remedy: 'Pass numeric ids, e.g. --container-user 1000:1000.',
    });
  }
  return user;
}

/** `name=/host/path` or `name=/host/path:ENV_NAME`; a path may itself contain ":". */
function parseSocket(spec: string): HostSocketRequest {
  const match = /^([^=]+)=(.+?)(?::([A-Za-z_][A-Za-z0-9_]*))?$/.exec(spec);
  if (match?.[1] === undefined || match[2] === undefined) {
    throw new SandboxdError('USAGE', `--socket ${spec}: expected NAME=PATH or NAME=PATH:ENV`, {
      remedy: 'For example --socket gpg=/run/user/1000/gnupg/S.gpg-agent:GPG_AGENT_SOCK.',
    });
  }
  return { name: match[1], hostPath: match[2], env: match[3] };
}

function passEnv(names: readonly string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const name of names) {
    const value = process.env[name];
    if (value === undefined) {
      throw new SandboxdError('USAGE', `--pass-env ${name}: ${name} is not set in this environment`, { remedy: `Set ${name} or drop --pass-env ${name}.` });
    }
    env[name] = value;
  }
  return env;
}

export function toAcquireOptions(flags: SessionFlags, engine: Engine): AcquireOptions {
  const containerUser = parseUser(flags);
  return {
    engine,
    sshAgent: flags.sshAgent,
    sshBridge: flags.sshBridge,
    connection: flags.connection,
    containerUser,
    label: flags.label,
    workdir: flags.workdir,
    mounts: flags.mount,
    cloudCredentials: flags.cloudCredentials === true,
    passEnv: passEnv(flags.passEnv),
    gitHooks: flags.gitHooks,
    gitConfig: flags.gitConfig,
    allowUnprotectedGitPaths: flags.allowUnprotectedGitPaths,
    allowWideWorkdir: flags.allowWideWorkdir,
    harden: flags.harden,
    // Left out when none is asked for: the request stays the one earlier releases sent.
    sockets: flags.socket.length === 0 ? undefined : flags.socket.map(parseSocket),
    // Left unset without the flag: the library then reads SANDBOXD_GIT_CREDENTIALS.
    gitCredentials: flags.gitCredentials.length === 0 ? undefined : parseCredentialHosts(flags.gitCredentials, '--git-credentials'),
  };
}
