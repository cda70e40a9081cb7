import { inject } from 'vitest';
import type { LabInfo } from '../lab/global-setup.js';

export const lab: LabInfo = inject('lab');

/**
 * End-to-end tests skip on a machine without the lab, but never under CI, where a missing lab
 * must fail the run instead of passing silently.
 */
export const labMissing = lab.podman === null && process.env.CI === undefined;

export function podmanLab(): NonNullable<LabInfo['podman']> {
  if (lab.podman === null) throw new Error(`the podman lab is not available: ${lab.reason ?? 'unknown'}`);
  return lab.podman;
}
