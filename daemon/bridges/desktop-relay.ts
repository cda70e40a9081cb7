import type { BridgeInfo, BridgeState } from '../../shared/contracts/bridges.js';
import { SandboxdError } from '../../shared/errors.js';
import { clip } from '../clip.js';
import type { Logger } from '../logger.js';
import type { RunSubprocess } from '../subprocess.js';
import type { Bridge } from './bridge.js';
import { RELAY_BINARY_IN_IMAGE } from './relay-image.js';

const COMMAND_TIMEOUT_MS = 30_000;
const READY_TIMEOUT_MS = 10_000;
const READY_POLL_MS = 100;
const READY_LINE = 'sandboxd-relay ready';
const UPSTREAM_IN_RELAY = '/upstream.sock';
const SERVED_DIR_IN_RELAY = '/srv';

export interface DesktopRelayOptions {
  id: string;
  /** Container and volume name, unique per sandboxd state dir, engine instance and user. */
  name: string;
  /** The VM's built-in agent socket (root:root 0660). */
  upstream: string;
  uid: number;
  gid: number;
  /** `docker import`s the relay image on first use; resolves to its tag. */
  image(): Promise<string>;
  run: RunSubprocess;
  docker: string;
  env: Record<string, string>;
  logger: Logger;
  sleep?: (ms: number) => Promise<void>;
}

/** The volume's tmpfs belongs to the session's user alone, so only it may create or reach the socket. */
export function volumeCreateArgs(name: string, uid: number, gid: number): string[] {
  return ['volume', 'create', '--driver', 'local', '--opt', 'type=tmpfs', '--opt', 'device=tmpfs', '--opt', `o=uid=${uid},gid=${gid},mode=0700`, '--label', 'sandboxd.relay=1', name];
}

/**
 * The relay runs as the session's uid:gid and holds gid 0 (the built-in socket's group) itself, with
 * no network, no capabilities, a read-only root and no-new-privileges; its socket is 0600.
 */
export function relayRunArgs(options: { name: string; upstream: string; uid: number; gid: number; image: string }): string[] {
  const { name } = options;
  return [
    'run', '--detach', '--name', name, '--label', 'sandboxd.relay=1', '--network', 'none', '--cap-drop', 'ALL', '--read-only',
    '--security-opt', 'no-new-privileges', '--user', `${options.uid}:${options.gid}`, '--group-add', '0', '--pull', 'never',
    '--mount', `type=bind,source=${options.upstream},target=${UPSTREAM_IN_RELAY}`,
    '--mount', `type=volume,source=${name},target=${SERVED_DIR_IN_RELAY}`,
    '--entrypoint', RELAY_BINARY_IN_IMAGE, options.image, UPSTREAM_IN_RELAY, `${SERVED_DIR_IN_RELAY}/agent.sock`,
  ];
}

/**
 * What a session adds to `run`: the volume, where the socket is `agent.sock`, read-only, so no
 * session can put a listener of its own there for the others (connecting needs no write access).
 */
export function sessionMountFlags(name: string, target: string): string[] {
  return ['--mount', `type=volume,source=${name},target=${target},readonly`];
}

/**
 * The shared relay container of one engine instance and container user (README, "Docker
 * Desktop"). Sessions mount its volume, never the VM socket, and never hold gid 0 themselves.
 * When the engine restarts the container is gone with it; the next session identifies a new
 * instance and gets a new relay, while this one idles out.
 */
export class DesktopRelay implements Bridge {
  readonly id: string;
  private state: BridgeState = 'starting';
  private ready: Promise<void> = Promise.resolve();
  private restarts = 0;
  private lastError: string | null = null;
  private readonly createdAt = new Date().toISOString();
  private readonly logger: Logger;

  constructor(private readonly options: DesktopRelayOptions) {
    this.id = options.id;
    this.logger = options.logger.child({ module: 'desktop-relay', tunnelId: options.id });
  }

  get volume(): string {
    return this.options.name;
  }

  start(): void {
    this.ready = this.launch();
    this.ready.catch(() => undefined);
  }

  whenReady(): Promise<void> {
    return this.ready;
  }

  async restart(): Promise<void> {
    this.state = 'restarting';
    this.restarts += 1;
    this.start();
    await this.ready;
  }

  async halt(): Promise<void> {
    this.state = 'stopped';
    await this.docker(['rm', '--force', this.options.name]);
    // Fails while a session container still mounts it; it is reused by the next relay of that name.
    await this.docker(['volume', 'rm', this.options.name]);
    this.logger.info('relay container halted');
  }

  describe(refs: number): BridgeInfo {
    return {
      id: this.id,
      kind: 'container-relay',
      connection: null,
      hostAgentSocket: this.options.upstream,
      socketPath: `${this.options.name}:/agent.sock`,
      state: this.state === 'ready' && refs === 0 ? 'draining' : this.state,
      refs,
      pid: null,
      restarts: this.restarts,
      createdAt: this.createdAt,
      lastError: this.lastError,
    };
  }

  private async launch(): Promise<void> {
    const { name, uid, gid } = this.options;
    try {
      // Whatever a previous daemon left under this name is ours (the name carries our state dir).
      await this.docker(['rm', '--force', name]);
      const volume = await this.docker(volumeCreateArgs(name, uid, gid));
      if (volume.exitCode !== 0) throw this.failure(`cannot create volume ${name}`, volume.stderr);
      const image = await this.options.image();
      const started = await this.docker(relayRunArgs({ name, upstream: this.options.upstream, uid, gid, image }));
      if (started.exitCode !== 0) throw this.failure(`cannot start relay container ${name}`, started.stderr);
      await this.awaitReadyLine();
      this.state = 'ready';
      this.lastError = null;
      this.logger.info({ name }, 'relay container ready');
    } catch (error) {
      this.state = 'failed';
      this.lastError = (error as Error).message;
      this.logger.error({ err: error }, 'relay container failed');
      throw error;
    }
  }

  /** The relay prints its ready line once it listens; `docker run -d` returns before that. */
  private async awaitReadyLine(): Promise<void> {
    const sleep = this.options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
    const deadline = Date.now() + READY_TIMEOUT_MS;
    for (;;) {
      const logs = await this.docker(['logs', this.options.name]);
      if (logs.stdout.includes(READY_LINE)) return;
      if (logs.stderr.includes('sandboxd-relay:') || Date.now() > deadline) {
        throw this.failure(`relay container ${this.options.name} did not become ready`, logs.stderr);
      }
      await sleep(READY_POLL_MS);
    }
  }

  private docker(args: string[]) {
    return this.options.run(this.options.docker, args, { env: this.options.env, timeoutMs: COMMAND_TIMEOUT_MS });
  }

  private failure(what: string, stderr: string): SandboxdError {
    const detail = clip(stderr.trim().split('\n').filter((line) => line !== '').at(-1) ?? '');
    return new SandboxdError('RELAY_CONTAINER_FAILED', `${what}${detail === '' ? '' : `: ${detail}`}`);
  }
}
