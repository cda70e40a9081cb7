import { promises as fs } from 'node:fs';
import path from 'node:path';
import { SandboxdError } from '../../shared/errors.js';
import type { Platform } from '../../shared/paths.js';
import type { PrivacyPrincipal } from '../../shared/contracts/status.js';

/**
 * The folders of a Mac user's home that macOS privacy (TCC) guards: listing or reading them takes
 * a grant to the responsible process (see `privacyPrincipal`).
 */
export const PROTECTED_FOLDERS = ['Desktop', 'Documents', 'Downloads', 'Library/Mobile Documents', 'Library/CloudStorage'] as const;

const FOLDER_NAMES: Record<(typeof PROTECTED_FOLDERS)[number], string> = {
  Desktop: 'Desktop',
  Documents: 'Documents',
  Downloads: 'Downloads',
  'Library/Mobile Documents': 'iCloud Drive',
  'Library/CloudStorage': 'a cloud storage provider',
};

/** The protected folder that holds `dir` (itself or above it), or null. */
export function protectedFolderOf(dir: string, home: string): { path: string; name: string } | null {
  for (const folder of PROTECTED_FOLDERS) {
    const root = path.join(home, folder);
    const relative = path.relative(root, dir);
    if (relative === '' || (!relative.startsWith('..') && !path.isAbsolute(relative))) return { path: root, name: FOLDER_NAMES[folder] };
  }
  return null;
}

/** git (or any tool) refused by privacy: `fatal: Unable to read current working directory: Operation not permitted`. */
export function deniedByPrivacy(stderr: string): boolean {
  return /: Operation not permitted\s*$/m.test(stderr);
}

export type { PrivacyPrincipal };

/**
 * Whom macOS privacy judges for this daemon, from how it was started. launchd's service is its own
 * responsible process, judged as the binary it runs. Anything else keeps the responsible process
 * of what spawned it, pinned at spawn and never updated (ghostty-org/ghostty#9263; a server
 * started from iTerm2 stays iTerm2's, herdrdev/herdr#3028); no public API reads it
 * (`responsibility_get_pid_responsible_for_pid` is private, developer.apple.com/forums/thread/731504),
 * so the environment names it: `__CFBundleIdentifier`, which an app launched by LaunchServices
 * hands to every process under it (tmux's server included), else TERM_PROGRAM; an ssh login names
 * none and is judged as Remote Login (`sshd-keygen-wrapper`). Auto-start passes these variables on.
 */
export function privacyPrincipal(input: { binary: string; serviceManager: 'launchd' | 'systemd' | undefined; env: NodeJS.ProcessEnv }): PrivacyPrincipal {
  const { binary, env } = input;
  if (input.serviceManager === 'launchd') return { binary, started: 'launchd', app: null };
  const named = (value: string | undefined): string | null => (value === undefined || value.trim() === '' ? null : value.trim());
  const bundle = named(env.__CFBundleIdentifier);
  if (bundle !== null) return { binary, started: 'app', app: bundle };
  if (named(env.SSH_CONNECTION) !== null) return { binary, started: 'ssh', app: null };
  const terminal = named(env.TERM_PROGRAM);
  return terminal === null ? { binary, started: 'other', app: null } : { binary, started: 'app', app: terminal };
}

const OUTSIDE = 'Or keep the project outside Desktop, Documents, Downloads and iCloud Drive.';

/** How the daemon was started, in a person's words; null when nothing names it. */
export function startedFrom(principal: PrivacyPrincipal): string | null {
  switch (principal.started) {
    case 'launchd':
      return 'started by launchd';
    case 'app':
      return `started from ${principal.app ?? 'an app'}`;
    case 'ssh':
      return 'started from an ssh login';
    case 'other':
      return null;
  }
}

/** What to grant, for how the daemon was started; `pane` is the settings pane that grants the folder. */
function privacyRemedy(principal: PrivacyPrincipal, pane: string): string {
  const install = `or run \`sandboxd install\` and grant the node binary it names (a Node upgrade needs that grant again)`;
  switch (principal.started) {
    case 'launchd':
      return `System Settings → Privacy & Security → ${pane} → add ${principal.binary} (the node the service runs), then run \`sandboxd restart\`; a Node upgrade changes that binary and needs the grant again. ${OUTSIDE}`;
    case 'app':
      return `macOS judges ${principal.app ?? 'the app'}, the app the daemon was started from: allow it in System Settings → Privacy & Security → ${pane}, quit and reopen it and run \`sandboxd restart\` there; or run \`sandboxd restart\` from a terminal that has that access; ${install}. ${OUTSIDE}`;
    case 'ssh':
      return `macOS judges ssh logins as Remote Login: System Settings → General → Sharing → Remote Login → Allow full disk access for remote users, then run \`sandboxd restart\`; or run \`sandboxd restart\` from a terminal app that may read the folder (${pane}); ${install}. ${OUTSIDE}`;
    case 'other':
      return `macOS judges the app the daemon was started from, which its environment does not name: run \`sandboxd restart\` from a terminal app that may read the folder (System Settings → Privacy & Security → ${pane}); ${install}. ${OUTSIDE}`;
  }
}

/** PRIVACY_DENIED for `dir`, naming the folder and what to grant for how the daemon was started. */
export function privacyDenied(dir: string, home: string, principal: PrivacyPrincipal, detail?: string): SandboxdError {
  const folder = protectedFolderOf(dir, home);
  const where = folder === null ? dir : `${dir} (in ${folder.name}, ${folder.path})`;
  const pane = folder === null ? 'Files and Folders (the folder) or Full Disk Access' : `Files and Folders (${folder.name}) or Full Disk Access`;
  const from = startedFrom(principal);
  const who = principal.started === 'launchd' ? 'the sandboxd service, which launchd starts,' : from === null ? 'the sandboxd daemon' : `the sandboxd daemon, ${from},`;
  return new SandboxdError('PRIVACY_DENIED', `macOS privacy settings keep ${who} from reading ${where}${detail === undefined ? '' : `: ${detail}`}`, {
    remedy: privacyRemedy(principal, pane),
  });
}

/** What `sandboxd install` says on a Mac: the service is judged as the node it runs, which a Node upgrade replaces. */
export function serviceGrantNote(node: string): string {
  return `macOS privacy judges the service as ${node}, not as your terminal: for projects in Desktop, Documents, Downloads or iCloud Drive, add it in System Settings → Privacy & Security → Full Disk Access (or Files and Folders), then run \`sandboxd restart\`; a Node upgrade changes that binary and needs the grant again (\`sandboxd doctor\` checks it).`;
}

/** Opens the directory and reads one entry: privacy guards listing and reading, not `stat`. */
export async function probeReadable(dir: string): Promise<boolean> {
  try {
    const handle = await fs.opendir(dir, { bufferSize: 1 });
    try {
      await handle.read();
    } finally {
      await handle.close();
    }
    return true;
  } catch (error) {
    // Anything but privacy (the directory gone, not one) is the plan's to report as it does.
    return (error as NodeJS.ErrnoException).code !== 'EPERM';
  }
}

export interface PrivacyGate {
  /** Throws PRIVACY_DENIED when the daemon may not read `dir` (macOS only). */
  check(dir: string): Promise<void>;
  /** A PRIVACY_DENIED a tool met under `dir`, with the folder and the binary to grant on a Mac. */
  explain(dir: string, error: unknown): unknown;
}

export interface PrivacyGateDeps {
  platform: Platform;
  home: string;
  principal: PrivacyPrincipal;
  readable?: (dir: string) => Promise<boolean>;
}

/**
 * Fails an acquire closed when macOS privacy keeps the daemon from reading its workdir: a plan
 * built then would have no repository to protect (hooks, config) and no git to ask (DESIGN §9:
 * no layout, no plan).
 */
export function createPrivacyGate(deps: PrivacyGateDeps): PrivacyGate {
  const readable = deps.readable ?? probeReadable;
  return {
    async check(dir) {
      if (deps.platform !== 'darwin') return;
      if (!(await readable(dir))) throw privacyDenied(dir, deps.home, deps.principal);
    },
    explain(dir, error) {
      if (deps.platform !== 'darwin' || !(error instanceof SandboxdError) || error.code !== 'PRIVACY_DENIED') return error;
      return privacyDenied(dir, deps.home, deps.principal, error.message);
    },
  };
}
