import { promises as fs } from 'node:fs';
import path from 'node:path';
import { SandboxdError } from '../../shared/errors.js';
import type { Platform } from '../../shared/paths.js';

/**
 * The folders of a Mac user's home that macOS privacy (TCC) guards: listing or reading them takes
 * a grant to the responsible process. A daemon launchd starts is its own; one started from a
 * terminal inherits the terminal's grant.
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

/** Who macOS asks about: the binary to grant, and whether launchd started it (no terminal's grant to inherit). */
export interface PrivacyPrincipal {
  binary: string;
  launchd: boolean;
}

/** PRIVACY_DENIED for `dir`, naming the folder and the binary to grant. */
export function privacyDenied(dir: string, home: string, principal: PrivacyPrincipal, detail?: string): SandboxdError {
  const folder = protectedFolderOf(dir, home);
  const where = folder === null ? dir : `${dir} (in ${folder.name}, ${folder.path})`;
  const who = principal.launchd ? 'the sandboxd service, which launchd starts,' : 'the sandboxd daemon';
  const grant = folder === null ? 'Files and Folders (the folder) or Full Disk Access' : `Files and Folders (${folder.name}) or Full Disk Access`;
  return new SandboxdError('PRIVACY_DENIED', `macOS privacy settings keep ${who} from reading ${where}${detail === undefined ? '' : `: ${detail}`}`, {
    remedy: `System Settings → Privacy & Security → ${grant} → add ${principal.binary}, then run \`sandboxd restart\`; or keep the project outside Desktop, Documents, Downloads and iCloud Drive.`,
  });
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
