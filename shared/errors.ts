/*
 * No zod here: every command of the CLI loads this module, and loading zod costs a noticeable part
 * of a command's start. The wire schemas live in contracts/errors.ts.
 */

interface ErrorSpec {
  readonly status: number;
  readonly remedy: string;
}

/**
 * Every error sandboxd reports, with its HTTP status and the default remedy. docs/errors.md lists the
 * same table; a code is never renamed once released.
 */
export const ERROR_SPECS = {
  BAD_REQUEST: { status: 400, remedy: 'Correct the value it names; `sandboxd sessions ls` and `sandboxd tunnels ls` list the ids in use.' },
  NOT_FOUND: { status: 404, remedy: 'Check the route; this daemon speaks /v1.' },
  PAYLOAD_TOO_LARGE: { status: 413, remedy: 'Send a smaller body (the limit is 64 KiB).' },
  UNSUPPORTED_MEDIA_TYPE: { status: 415, remedy: 'Send JSON with content-type application/json.' },
  SESSION_NOT_FOUND: { status: 404, remedy: 'The session ended or was reaped; acquire a new one.' },
  SESSION_LIMIT: { status: 429, remedy: 'Release unused sessions (`sandboxd sessions ls`).' },
  SSH_AGENT_UNAVAILABLE: {
    status: 422,
    remedy: 'Start an agent (`eval "$(ssh-agent)"` and `ssh-add`), or run without one: --ssh-agent auto (library: sshAgent: \'auto\').',
  },
  INVALID_MOUNT: { status: 400, remedy: 'Give an absolute, existing path without ":" or ",".' },
  UNSUPPORTED_PATH: { status: 400, remedy: 'Rename or move it: a path with a newline, or with both ":" and ",", cannot be mounted.' },
  REPOSITORY_UNSAFE: {
    status: 422,
    remedy: 'Inspect the file the message names; if you did not put it there, move it aside (`mv FILE FILE.bak`) and retry.',
  },
  REPOSITORY_UNSUPPORTED: {
    status: 422,
    remedy: 'Change the repository as the message says (or run the session in a clone that has the usual layout) and retry.',
  },
  GIT_PATH_UNPROTECTED: {
    status: 422,
    remedy: 'Create the file or directory it names (so the sandbox gets it read-only), point your git config elsewhere, or pass --allow-unprotected-git-paths (library: allowUnprotectedGitPaths) to let the session run anyway.',
  },
  WORKDIR_TOO_WIDE: { status: 400, remedy: 'Run from the project directory, or pass --allow-wide-workdir (library: allowWideWorkdir) if you mean it.' },
  SHUTTING_DOWN: { status: 503, remedy: 'The daemon is stopping; retry in a moment.' },
  DAEMON_BUSY: { status: 503, remedy: 'The daemon is out of processes or file descriptors; retry in a moment.' },
  HEADERS_TOO_LARGE: { status: 431, remedy: 'Send smaller request headers.' },
  REQUEST_TIMEOUT: { status: 408, remedy: 'Send the whole request promptly; the daemon stops waiting after a few seconds.' },
  INTERNAL: { status: 500, remedy: 'See the daemon log (`sandboxd status` prints its path).' },
  INSECURE_DIRECTORY: {
    status: 500,
    remedy: 'Fix the owner and mode (chown, chmod 700) or point the SANDBOXD_*_DIR variable elsewhere.',
  },
  SOCKET_PATH_TOO_LONG: {
    status: 500,
    remedy: 'Set SANDBOXD_RUNTIME_DIR to a shorter directory.',
  },
  DAEMON_ALREADY_RUNNING: { status: 409, remedy: 'Use the running daemon, or `sandboxd stop` it first.' },
  DAEMON_NOT_RUNNING: { status: 503, remedy: 'Run `sandboxd start`.' },
  DAEMON_START_FAILED: { status: 503, remedy: 'Run `sandboxd daemon` in a terminal to see why it fails.' },
  DAEMON_TIMEOUT: { status: 504, remedy: 'Check `sandboxd status`; restart it with `sandboxd restart`.' },
  PROTOCOL_MISMATCH: { status: 409, remedy: 'Run `sandboxd restart` to start the installed version.' },
  INVALID_RESPONSE: { status: 502, remedy: 'Run `sandboxd restart`; the daemon answered unexpectedly.' },
  SSH_BRIDGE_UNSUPPORTED: { status: 422, remedy: 'Pick another --ssh-bridge (auto, mount, tunnel, none).' },
  PODMAN_NOT_FOUND: { status: 422, remedy: 'Install podman, or make sure the PATH of the calling shell contains it.' },
  PODMAN_NO_CONNECTIONS: {
    status: 422,
    remedy: 'Run `podman machine init && podman machine start`, or add one with `podman system connection add`.',
  },
  PODMAN_NO_DEFAULT_CONNECTION: { status: 422, remedy: 'Run `podman system connection default <name>`, or set CONTAINER_CONNECTION.' },
  PODMAN_CONNECTION_NOT_FOUND: { status: 422, remedy: 'List them with `podman system connection list`.' },
  PODMAN_CONNECTIONS_UNPARSABLE: { status: 502, remedy: 'Check `podman system connection list --format json` by hand; upgrade podman if it fails.' },
  PODMAN_CONNECTION_UNSUPPORTED: { status: 422, remedy: 'Use an ssh:// connection (a Podman machine or remote host) or --ssh-bridge mount.' },
  TUNNEL_UNREACHABLE: { status: 503, remedy: 'Run `podman machine start` (or bring the remote host up); the tunnel recovers by itself.' },
  TUNNEL_AUTH_FAILED: { status: 502, remedy: 'Check the connection\'s Identity key: `podman system connection list`.' },
  TUNNEL_FAILED: { status: 502, remedy: 'See `sandboxd tunnels ls` for the last error; `sandboxd tunnels restart ID` retries.' },
  TUNNEL_NOT_FOUND: { status: 404, remedy: 'List the tunnels with `sandboxd tunnels ls`.' },
  TUNNEL_BIND_REFUSED: {
    status: 502,
    remedy: 'Look for a denial in the VM (`podman machine ssh sudo journalctl -t audit -g sshd`); where SELinux confines sshd-session, update the machine image or use --ssh-bridge none.',
  },
  MOUNT_NOT_SHARED: {
    status: 422,
    remedy: 'Share the directory with the VM (`podman machine init --volume SRC:SRC`, on a new machine) or move the project under a shared directory (by default /Users, /private, /var/folders on a Mac).',
  },
  PRIVACY_DENIED: {
    status: 403,
    remedy: 'On a Mac: System Settings → Privacy & Security → Files and Folders (the folder) or Full Disk Access → add the node binary that runs sandboxd (`sandboxd doctor` names it), then `sandboxd restart`; or keep the project outside Desktop, Documents, Downloads and iCloud Drive.',
  },
  ENGINE_NOT_FOUND: { status: 422, remedy: 'Install the engine or add it to PATH.' },
  DOCKER_INFO_FAILED: {
    status: 502,
    remedy: 'Check that `docker info` works in your shell: start the engine (Linux: `sudo systemctl start docker`; macOS: Docker Desktop, OrbStack or `colima start`), or fix DOCKER_HOST / DOCKER_CONTEXT.',
  },
  RELAY_CONTAINER_FAILED: { status: 502, remedy: 'See `sandboxd tunnels ls` for the relay container\'s last error; `sandboxd tunnels restart ID` retries.' },
  RUN_ARGS_UNPARSABLE: { status: 400, remedy: 'Write that run option as --name=value, so its value cannot be mistaken for the image.' },
  STATE_WRITE_FAILED: { status: 507, remedy: 'Free space in the state dir (or fix its permissions), or point SANDBOXD_STATE_DIR elsewhere; no plan was handed out.' },
  CONTAINER_REMOVE_FAILED: { status: 502, remedy: 'Remove it by hand (`podman rm -f ID` or `docker rm -f ID`); the daemon log has the engine\'s error.' },
  USAGE: { status: 400, remedy: 'See `sandboxd --help`.' },
  SERVICE_VALUE_UNSUPPORTED: {
    status: 400,
    remedy: 'Remove the control character (a newline, a tab …) from the path or variable it names, then run `sandboxd install` again.',
  },
  SERVICE_MANAGER_UNREACHABLE: {
    status: 503,
    remedy: 'Run `sandboxd install` where your service manager runs (a desktop login; on Linux also after `loginctl enable-linger`), or skip it: clients start the daemon themselves.',
  },
  SERVICE_FAILED: { status: 500, remedy: 'Run the command it names by hand to see why; `sandboxd install --dry-run` prints every step.' },
  LOG_NOT_FOUND: { status: 404, remedy: 'The daemon has not logged yet, or logs to stdout (`sandboxd daemon --log stdout`): read it where that goes.' },
} as const satisfies Record<string, ErrorSpec>;

export type ErrorCode = keyof typeof ERROR_SPECS;

/** How to start a Docker engine where it runs: a service on Linux, an app or a VM on a Mac. */
export function dockerStartRemedy(platform: 'linux' | 'darwin'): string {
  return platform === 'darwin'
    ? 'Start Docker Desktop, OrbStack or `colima start`, or point DOCKER_HOST / DOCKER_CONTEXT at an engine that runs.'
    : 'Start the Docker service: `sudo systemctl start docker` (rootless Docker: `systemctl --user start docker`), or point DOCKER_HOST / DOCKER_CONTEXT at an engine that runs.';
}

/**
 * An error as it crosses the wire. Written out here rather than inferred from the schema: this
 * module stays free of zod, and contracts/errors.ts holds its schema to this shape.
 */
export interface ErrorObject {
  code: ErrorCode;
  message: string;
  remedy: string;
}

/** The one error type both sides throw; it crosses the wire as contracts/errors.ts's ErrorBody. */
export class SandboxdError extends Error {
  override readonly name = 'SandboxdError';
  readonly code: ErrorCode;
  readonly remedy: string;

  constructor(code: ErrorCode, message: string, options?: { remedy?: string; cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.remedy = options?.remedy ?? ERROR_SPECS[code].remedy;
  }

  get status(): number {
    return ERROR_SPECS[this.code].status;
  }

  toJSON(): ErrorObject {
    return { code: this.code, message: this.message, remedy: this.remedy };
  }

  static fromObject(error: ErrorObject): SandboxdError {
    return new SandboxdError(error.code, error.message, { remedy: error.remedy });
  }
}

export function isSandboxdError(value: unknown): value is SandboxdError {
  return value instanceof SandboxdError;
}
