import { SandboxdError } from '../../shared/errors.js';
import { isRequiredMount, type Mount } from '../../shared/contracts/plan.js';

// eslint-disable-next-line no-control-regex -- control characters are exactly what is refused
const CONTROL = /[\u0000-\u001f\u007f]/;

/**
 * `-v src:dst[:opts]` splits on `:`; `--mount type=bind,…` splits on `,` (and treats `"` as CSV
 * quoting). A path with a colon takes the second form; one that neither form can carry (a control
 * character, or a colon together with a comma or quote) is refused before the engine sees it.
 */
function problem(value: string): string | null {
  if (CONTROL.test(value)) return 'contains a newline or another control character';
  if (value.includes(':') && (value.includes(',') || value.includes('"'))) return 'contains both ":" and "," (or a quote)';
  return null;
}

function needsMountForm(mount: Mount): boolean {
  return mount.source.includes(':') || mount.target.includes(':');
}

/** The engine arguments for one mount (DESIGN §8 puts `:z` on Podman mounts for SELinux hosts). */
export function mountArgs(mount: Mount): string[] {
  if (needsMountForm(mount)) {
    const options = [mount.readOnly ? 'ro' : null, mount.relabel === 'z' ? 'relabel=shared' : null].filter((option) => option !== null);
    return ['--mount', [`type=bind`, `source=${mount.source}`, `destination=${mount.target}`, ...options].join(',')];
  }
  const options = [mount.readOnly ? 'ro' : null, mount.relabel ?? null].filter((option) => option !== null);
  const spec = `${mount.source}:${mount.target}`;
  return ['-v', options.length === 0 ? spec : `${spec}:${options.join(',')}`];
}

/**
 * Keeps the mounts the engine can be given. A required one that cannot be expressed fails the
 * acquire with UNSUPPORTED_PATH naming the path; an optional one is dropped with a warning.
 */
export function expressibleMounts(mounts: readonly Mount[]): { mounts: Mount[]; warnings: string[] } {
  const kept: Mount[] = [];
  const warnings: string[] = [];
  for (const mount of mounts) {
    const [path, why] = [mount.source, mount.target].map((value) => [value, problem(value)] as const).find(([, reason]) => reason !== null) ?? [null, null];
    if (path === null || why === null) {
      kept.push(mount);
      continue;
    }
    const shown = JSON.stringify(path);
    if (isRequiredMount(mount)) {
      throw new SandboxdError('UNSUPPORTED_PATH', `the ${mount.purpose} path ${shown} ${why}, which no engine mount option can carry`);
    }
    warnings.push(`skipped the ${mount.purpose} mount of ${shown}: it ${why}, which no engine mount option can carry`);
  }
  return { mounts: kept, warnings };
}
