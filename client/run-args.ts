import path from 'node:path';
import { SandboxdError } from '../shared/errors.js';

/**
 * `podman run` (4.x, 5.x) and `docker run` (27.x) options that take a value, by long name. Where
 * the image starts can only be known by knowing these: in `--user 1000 node sh`, `1000` is a value
 * and `node` the image.
 */
const VALUE_OPTIONS = new Set([
  'add-host', 'annotation', 'arch', 'attach', 'authfile', 'blkio-weight', 'blkio-weight-device', 'cap-add', 'cap-drop',
  'cert-dir', 'cgroup-conf', 'cgroup-parent', 'cgroupns', 'cgroups', 'chrootdirs', 'cidfile', 'conmon-pidfile',
  'cpu-count', 'cpu-percent', 'cpu-period', 'cpu-quota', 'cpu-rt-period', 'cpu-rt-runtime', 'cpu-shares', 'cpus',
  'cpuset-cpus', 'cpuset-mems', 'creds', 'decryption-key', 'detach-keys', 'device', 'device-cgroup-rule', 'device-read-bps',
  'device-read-iops', 'device-write-bps', 'device-write-iops', 'dns', 'dns-opt', 'dns-option', 'dns-search', 'domainname',
  'entrypoint', 'env', 'env-file', 'env-merge', 'expose', 'gidmap', 'gpus', 'group-add', 'group-entry', 'health-cmd',
  'health-interval', 'health-log-destination', 'health-max-log-count', 'health-max-log-size', 'health-on-failure',
  'health-retries', 'health-start-interval', 'health-start-period', 'health-startup-cmd', 'health-startup-interval',
  'health-startup-retries', 'health-startup-success', 'health-startup-timeout', 'health-timeout', 'hostname', 'hosts-file',
  'hostuser', 'image-volume', 'init-path', 'io-maxbandwidth', 'io-maxiops', 'ip', 'ip6', 'ipc', 'isolation',
  'kernel-memory', 'label', 'label-file', 'link', 'link-local-ip', 'log-driver', 'log-opt', 'mac-address', 'memory',
  'memory-reservation', 'memory-swap', 'memory-swappiness', 'mount', 'name', 'net', 'net-alias', 'network',
  'network-alias', 'oom-score-adj', 'os', 'passwd-entry', 'personality', 'pid', 'pidfile', 'pids-limit', 'platform', 'pod',
  'pod-id-file', 'preserve-fd', 'preserve-fds', 'publish', 'pull', 'rdt-class', 'requires', 'restart', 'retry',
  'retry-delay', 'runtime', 'sdnotify', 'seccomp-policy', 'secret', 'security-opt', 'shm-size', 'shm-size-systemd',
  'stop-signal', 'stop-timeout', 'storage-opt', 'subgidname', 'subuidname', 'sysctl', 'systemd', 'timeout', 'tmpfs', 'tz',
  'uidmap', 'ulimit', 'umask', 'unsetenv', 'user', 'userns', 'uts', 'variant', 'volume', 'volume-driver', 'volumes-from',
  'workdir',
]);

/** Options that take no value (`--rm`; podman also accepts `--rm=false`). */
const BOOLEAN_OPTIONS = new Set([
  'detach', 'disable-content-trust', 'env-host', 'help', 'http-proxy', 'init', 'interactive', 'no-healthcheck',
  'no-hostname', 'no-hosts', 'oom-kill-disable', 'passwd', 'privileged', 'publish-all', 'quiet', 'read-only',
  'read-only-tmpfs', 'replace', 'rm', 'rmi', 'rootfs', 'sig-proxy', 'tls-verify', 'tty', 'unsetenv-all', 'use-api-socket',
]);

/** Options that may be given more than once with different values; the rest hold one value. */
const REPEATABLE_OPTIONS = new Set([
  'add-host', 'annotation', 'attach', 'blkio-weight-device', 'cap-add', 'cap-drop', 'cgroup-conf', 'chrootdirs', 'device',
  'device-cgroup-rule', 'device-read-bps', 'device-read-iops', 'device-write-bps', 'device-write-iops', 'dns', 'dns-opt',
  'dns-option', 'dns-search', 'env', 'env-file', 'env-merge', 'expose', 'gidmap', 'group-add', 'hostuser', 'label',
  'label-file', 'link', 'link-local-ip', 'log-opt', 'mount', 'net-alias', 'network-alias', 'preserve-fd', 'publish',
  'requires', 'secret', 'security-opt', 'storage-opt', 'sysctl', 'tmpfs', 'uidmap', 'ulimit', 'unsetenv', 'volume',
  'volumes-from',
]);

const SHORT_OPTIONS: Readonly<Record<string, string>> = {
  a: 'attach', c: 'cpu-shares', d: 'detach', e: 'env', h: 'hostname', i: 'interactive', l: 'label', m: 'memory',
  p: 'publish', P: 'publish-all', q: 'quiet', t: 'tty', u: 'user', v: 'volume', w: 'workdir',
};

/** One option of a `run` argument list, by its long name. */
export interface RunOption {
  /** Long name without dashes, old spellings folded (`net` is `network`). */
  name: string;
  /** null for a flag without a value. */
  value: string | null;
  /** The tokens it was written as: `[start, end)`; options of one short cluster (`-it`) share them. */
  start: number;
  end: number;
}

export interface ParsedRunArgs {
  /** Index of a leading `run`, or -1. */
  runIndex: number;
  options: RunOption[];
  /** Where the options end: the image, or the `--` before it (the list's length when neither). */
  optionsEnd: number;
}

function unparsable(message: string): SandboxdError {
  return new SandboxdError('RUN_ARGS_UNPARSABLE', message);
}

function takesValue(name: string, written: string): boolean {
  if (VALUE_OPTIONS.has(name)) return true;
  if (BOOLEAN_OPTIONS.has(name)) return false;
  throw unparsable(`unknown run option ${written}: sandboxd cannot tell whether it takes a value, so it cannot tell where the image starts`);
}

/** `-it`, `-e NAME=v`, `-eNAME=v`, `-v /a:/b`: short options cluster until one takes a value. */
function parseShort(args: readonly string[], index: number, options: RunOption[]): number {
  const token = args[index] ?? '';
  for (let at = 1; at < token.length; at += 1) {
    const letter = token.charAt(at);
    const name = SHORT_OPTIONS[letter];
    if (name === undefined) throw unparsable(`unknown run option -${letter} (in ${token})`);
    if (!takesValue(name, `-${letter}`)) {
      options.push({ name, value: null, start: index, end: index + 1 });
      continue;
    }
    const attached = token.slice(at + 1);
    if (attached !== '') {
      options.push({ name, value: attached, start: index, end: index + 1 });
      return index + 1;
    }
    const value = args[index + 1];
    if (value === undefined) throw unparsable(`run option -${letter} needs a value`);
    options.push({ name, value, start: index, end: index + 2 });
    return index + 2;
  }
  return index + 1;
}

function parseLong(args: readonly string[], index: number, options: RunOption[]): number {
  const token = args[index] ?? '';
  const equals = token.indexOf('=');
  if (equals !== -1) {
    // Self-contained whatever the option is: one the tables do not know yet is fine this way.
    const name = token.slice(2, equals);
    options.push({ name: canonicalName(name), value: token.slice(equals + 1), start: index, end: index + 1 });
    return index + 1;
  }
  const name = token.slice(2);
  if (!takesValue(name, token)) {
    options.push({ name: canonicalName(name), value: null, start: index, end: index + 1 });
    return index + 1;
  }
  const value = args[index + 1];
  if (value === undefined) throw unparsable(`run option ${token} needs a value`);
  options.push({ name: canonicalName(name), value, start: index, end: index + 2 });
  return index + 2;
}

/**
 * Reads a `podman run` / `docker run` argument list (with or without the leading `run`) up to the
 * image: the first argument that is neither an option nor an option's value. Throws
 * RUN_ARGS_UNPARSABLE on an option it does not know, rather than guess where the image starts.
 */
export function parseRunArgs(args: readonly string[]): ParsedRunArgs {
  const runIndex = args[0] === 'run' ? 0 : -1;
  const options: RunOption[] = [];
  let index = runIndex + 1;
  while (index < args.length) {
    const token = args[index] ?? '';
    if (token === '--' || !token.startsWith('-') || token === '-') break;
    index = token.startsWith('--') ? parseLong(args, index, options) : parseShort(args, index, options);
  }
  return { runIndex, options, optionsEnd: index };
}

export function isRepeatable(name: string): boolean {
  return REPEATABLE_OPTIONS.has(name);
}

/** One name per option: `net` is the old spelling of `network`, and so on. */
function canonicalName(name: string): string {
  if (name === 'net') return 'network';
  if (name === 'net-alias') return 'network-alias';
  if (name === 'dns-opt') return 'dns-option';
  return name;
}

/** An empty, `.` or `..` segment: an absolute path with none is its own normal form, but for a trailing slash. */
const NOT_NORMAL = /\/\/|\/\.\.?(?:\/|$)/;

function normalTarget(target: string): string {
  // path's normalize walks a path character by character in JavaScript, and a launch's plan has a
  // dozen mount targets, already normal: on Node the JIT would compile that loop mid-launch.
  const normal = target.startsWith('/') && !NOT_NORMAL.test(target) ? target : path.posix.normalize(target);
  return normal.length > 1 && normal.endsWith('/') ? normal.slice(0, -1) : normal;
}

/** `--mount` values are CSV: comma-separated `key=value` fields, a field may be double-quoted. */
function csvFields(value: string): string[] {
  const fields: string[] = [];
  let field = '';
  let quoted = false;
  for (const char of value) {
    if (char === '"') quoted = !quoted;
    else if (char === ',' && !quoted) {
      fields.push(field);
      field = '';
    } else field += char;
  }
  fields.push(field);
  return fields;
}

function mountTarget(value: string): string | null {
  for (const field of csvFields(value)) {
    const equals = field.indexOf('=');
    const key = field.slice(0, equals).trim().toLowerCase();
    if (equals !== -1 && (key === 'destination' || key === 'dst' || key === 'target')) return field.slice(equals + 1);
  }
  return null;
}

/** Where a mount option puts something in the container, or null for an option that mounts nothing. */
export function mountDestination(option: RunOption): string | null {
  if (option.value === null) return null;
  let target: string | null = null;
  if (option.name === 'volume') {
    // `src:dst[:opts]`, or a bare `dst` for an anonymous volume.
    const parts = option.value.split(':');
    target = parts.length === 1 ? (parts[0] ?? null) : (parts[1] ?? null);
  } else if (option.name === 'mount') target = mountTarget(option.value);
  else if (option.name === 'tmpfs') target = option.value.split(':')[0] ?? null;
  return target === null || target === '' ? null : normalTarget(target);
}

/** The variable an `-e` option sets (`NAME=value`, or `NAME` taken from the engine's environment). */
export function envName(option: RunOption): string | null {
  if (option.name !== 'env' || option.value === null) return null;
  const equals = option.value.indexOf('=');
  return equals === -1 ? option.value : option.value.slice(0, equals);
}
