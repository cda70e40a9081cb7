import type { EngineStatus } from '../../shared/contracts/status.js';
import { formatAge } from './output.js';

/** `sandboxd status`: each Docker engine sessions used, its bridge and its agent probe with age. */
export function engineLines(engines: readonly EngineStatus[]): string[] {
  if (engines.length === 0) return [];
  return [
    '  engines:',
    ...engines.flatMap((engine) => [
      `    ${engine.name} (${engine.kind}) at ${engine.endpoint}: bridge ${engine.bridge}`,
      engine.probe === null
        ? '      probe: none yet'
        : `      probe: ${engine.probe.state}, ${engine.probe.detail} (${formatAge(engine.probe.at)} ago)`,
    ]),
  ];
}
