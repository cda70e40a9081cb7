import type { Plan } from '../shared/contracts/plan.js';
import { SandboxdError } from '../shared/errors.js';
import { envName, isRepeatable, mountDestination, parseRunArgs, type RunOption } from './run-args.js';

/** Plan arguments left out because the caller's own arguments already decide the same thing. */
export interface SkippedPlanArgs {
  kind: 'mount' | 'env' | 'flag';
  /** The mount destination, variable name or option name (`security-opt`) both sides set. */
  key: string;
  /** The plan's arguments that were left out, as written in `plan.args`. */
  args: string[];
  reason: string;
}

export interface AppliedPlan {
  /** The caller's list (its leading `run` kept, if any) with the plan's arguments just before the image. */
  args: string[];
  skipped: SkippedPlanArgs[];
  /**
   * Variables the engine process must have in its own environment: the plan passes them by name
   * (`-e NAME`) so their values stay off the command line. Merge them into the engine's spawn env.
   */
  spawnEnv: Record<string, string>;
  /** Engine arguments that go before `run` (e.g. `--connection NAME`). */
  globalArgs: string[];
  /** The plan's arguments that were added, and where: `args.slice(at, at + added.length)`. */
  inserted: { at: number; added: string[] };
}

/**
 * Options that each decide the user namespace: podman refuses `--userns` beside `--uidmap` or
 * `--gidmap`, so a caller that chose one keeps its choice and the plan's `--userns` is left out.
 */
const USER_NAMESPACE_OPTIONS = new Set(['userns', 'uidmap', 'gidmap', 'subuidname', 'subgidname']);

/** What the arguments seen so far decide, and who decided it. */
class Claims {
  private readonly targets = new Map<string, string>();
  private readonly env = new Map<string, string>();
  private readonly values = new Map<string, Set<string>>();
  /** Who chose the user namespace, and with which option. */
  private userNamespace: { by: string; option: string } | null = null;

  /** Why `option` must not be added, or null; records it as decided when it may. */
  claim(option: RunOption, by: string): Omit<SkippedPlanArgs, 'args'> | null {
    const target = mountDestination(option);
    if (target !== null) {
      const owner = this.targets.get(target);
      if (owner !== undefined) return { kind: 'mount', key: target, reason: `${owner} mounts ${target} already` };
      this.targets.set(target, by);
      return null;
    }
    const name = envName(option);
    if (name !== null) {
      const owner = this.env.get(name);
      if (owner !== undefined) return { kind: 'env', key: name, reason: `${owner} sets ${name} already` };
      this.env.set(name, by);
      return null;
    }
    if (USER_NAMESPACE_OPTIONS.has(option.name)) {
      const chosen = this.userNamespace;
      if (chosen !== null && chosen.by !== by) return { kind: 'flag', key: option.name, reason: `${chosen.by} chose the user namespace already (--${chosen.option})` };
      this.userNamespace = { by, option: option.name };
    }
    const seen = this.values.get(option.name);
    const value = option.value ?? '';
    if (seen !== undefined && (!isRepeatable(option.name) || seen.has(value))) {
      const what = isRepeatable(option.name) ? `--${option.name} ${value}` : `--${option.name}`;
      return { kind: 'flag', key: option.name, reason: `the run arguments have ${what} already` };
    }
    this.values.set(option.name, (seen ?? new Set()).add(value));
    return null;
  }
}

/**
 * Merges a plan into a `run` argument list the caller built itself (DESIGN §10): the caller's
 * mounts, variables and single-valued options win; a plan argument that would repeat a mount
 * destination (podman exits 125 on those), a variable or a flag is left out and reported. Pure.
 */
export function applyPlan(runArgs: readonly string[], plan: Pick<Plan, 'args' | 'spawnEnv' | 'globalArgs'>): AppliedPlan {
  const caller = parseRunArgs(runArgs);
  const planned = parseRunArgs(plan.args);
  if (planned.runIndex !== -1 || planned.optionsEnd !== plan.args.length) {
    throw new SandboxdError('INVALID_RESPONSE', `the plan's run arguments are not all options: ${plan.args.slice(planned.optionsEnd).join(' ')}`);
  }
  const claims = new Claims();
  for (const option of caller.options) claims.claim(option, 'the caller');

  const skipped: SkippedPlanArgs[] = [];
  const dropped = new Set<number>();
  const keptEnv = new Set<string>();
  for (const option of planned.options) {
    const conflict = claims.claim(option, 'the plan');
    if (conflict !== null) {
      skipped.push({ ...conflict, args: plan.args.slice(option.start, option.end) });
      dropped.add(option.start);
    } else {
      const name = envName(option);
      if (name !== null) keptEnv.add(name);
    }
  }
  const added: string[] = [];
  let next = 0;
  for (const option of planned.options) {
    // Options of one short cluster share their tokens: emit each span once, and only if all of it is kept.
    if (option.start < next) continue;
    next = option.end;
    if (!dropped.has(option.start)) added.push(...plan.args.slice(option.start, option.end));
  }
  return {
    args: [...runArgs.slice(0, caller.optionsEnd), ...added, ...runArgs.slice(caller.optionsEnd)],
    skipped,
    spawnEnv: Object.fromEntries(Object.entries(plan.spawnEnv).filter(([name]) => keptEnv.has(name))),
    globalArgs: [...plan.globalArgs],
    inserted: { at: caller.optionsEnd, added },
  };
}
