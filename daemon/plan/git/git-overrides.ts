import path from 'node:path';
import { shQuote } from '../../os/text.js';
import type { ConfigEntry } from './git-config.js';
import type { ConfigSetting } from './git-config-text.js';

/** One `key = value` the generated global config sets after the user's own files. */
export interface Override extends ConfigSetting {
  value: string;
}

export interface Overrides {
  settings: Override[];
  /** What will fail or differ in the sandbox. */
  warnings: string[];
  /** Overrides that need no action: said by `plan` and `run -v` only. */
  notices: string[];
  /** Host files the settings name, to mount where `sandboxPath` says. */
  files: XdgDefault[];
  /** Commits or tags are signed with SSH keys: the agent must reach the container. */
  sshSigning: boolean;
}

/** A file git reads by default from `$XDG_CONFIG_HOME/git/` when no key names another. */
export interface XdgDefault {
  key: 'core.excludesfile' | 'core.attributesfile';
  /** The host file, which exists. */
  file: string;
}

export interface OverrideInput {
  /** Global-scope entries, in git's order. */
  entries: readonly ConfigEntry[];
  hostHome: string;
  /** known_hosts files as the container sees them; empty when the host has none. */
  knownHosts: readonly string[];
  /** Where the container finds a host file the config names (see sandboxPath). */
  sandboxPath(file: string): string;
  /** Whether `<path>.pub` exists on the host, for a signing key that names a private key. */
  publicKeyExists(file: string): Promise<boolean>;
  /** git's XDG `ignore` and `attributes` files that exist on the host. */
  xdgDefaults: readonly XdgDefault[];
}

/** Credential helpers that exist in any image with git; everything else is a host program. */
const PORTABLE_HELPER = /^(cache|store)(\s|$)/;

/** Programs that only exist on the host: macOS app bundles and package prefixes, Windows paths. */
const HOST_ONLY_PROGRAM = /^(["']?)(\/Applications\/|\/System\/|\/Library\/|\/opt\/homebrew\/|\/usr\/local\/Cellar\/|\/Users\/|[A-Za-z]:[\\/]|\/mnt\/[a-z]\/)|\.app\//;

const DEFAULT_PROGRAMS: Record<string, string> = { 'core.editor': 'vi', 'sequence.editor': 'vi', 'core.pager': 'less' };

function last(entries: readonly ConfigEntry[], key: string): string | null | undefined {
  const found = entries.filter((entry) => entry.key === key).at(-1);
  return found === undefined ? undefined : found.value;
}

function isTrue(value: string | null | undefined): boolean {
  return value === null || ['true', 'yes', 'on', '1'].includes((value ?? '').toLowerCase());
}

function expandHome(value: string, home: string): string {
  if (value === '~') return home;
  return value.startsWith('~/') ? path.join(home, value.slice(2)) : value;
}


/** `credential.helper` and `credential.<url>.helper`, grouped by URL (null: the plain section). */
function credentialHelpers(entries: readonly ConfigEntry[]): Map<string | null, string[]> {
  const groups = new Map<string | null, string[]>();
  for (const entry of entries) {
    const match = /^credential\.(?:(.+)\.)?helper$/.exec(entry.key);
    if (match === null) continue;
    const url = match[1] ?? null;
    const values = groups.get(url) ?? [];
    // An empty value resets the list, as git does.
    groups.set(url, entry.value === null || entry.value === '' ? [] : [...values, entry.value]);
  }
  return groups;
}

function credentialOverrides(entries: readonly ConfigEntry[], out: Overrides): void {
  for (const [url, helpers] of credentialHelpers(entries)) {
    const dropped = helpers.filter((helper) => !PORTABLE_HELPER.test(helper));
    if (dropped.length === 0) continue;
    const subsection = url === null ? {} : { subsection: url };
    out.settings.push({ section: 'credential', ...subsection, key: 'helper', value: '' });
    for (const helper of helpers.filter((value) => PORTABLE_HELPER.test(value))) {
      out.settings.push({ section: 'credential', ...subsection, key: 'helper', value: helper });
    }
    out.notices.push(
      `git: credential helper ${dropped.map((helper) => `"${helper}"`).join(', ')}${url === null ? '' : ` for ${url}`} is a host program; it is reset in the sandbox`,
    );
  }
}

function programOverrides(entries: readonly ConfigEntry[], out: Overrides): void {
  const fsmonitor = last(entries, 'core.fsmonitor');
  if (fsmonitor !== undefined && fsmonitor !== 'false') {
    out.settings.push({ section: 'core', key: 'fsmonitor', value: 'false' });
    out.notices.push('git: core.fsmonitor runs a host program; it is off in the sandbox');
  }
  for (const [key, fallback] of Object.entries(DEFAULT_PROGRAMS)) {
    const value = last(entries, key);
    if (value === undefined || value === null || !HOST_ONLY_PROGRAM.test(value)) continue;
    const [section = '', name = ''] = key.split('.');
    out.settings.push({ section, key: name, value: fallback });
    out.notices.push(`git: ${key} "${value}" is a host program; the sandbox uses ${fallback}`);
  }
}

/**
 * SSH signing goes through the forwarded agent with the image's ssh-keygen; OpenPGP and X.509
 * cannot sign in the sandbox, which is said up front instead of surfacing as failed commits.
 */
async function signingOverrides(input: OverrideInput, out: Overrides): Promise<void> {
  const { entries } = input;
  const program = last(entries, 'gpg.ssh.program');
  if (program !== undefined && program !== 'ssh-keygen') {
    out.settings.push({ section: 'gpg', subsection: 'ssh', key: 'program', value: 'ssh-keygen' });
    out.notices.push(`git: gpg.ssh.program "${program ?? ''}" is a host program; the sandbox signs with ssh-keygen through the forwarded agent`);
  }
  const signs = isTrue(last(entries, 'commit.gpgsign') ?? 'false') || isTrue(last(entries, 'tag.gpgsign') ?? 'false');
  const format = (last(entries, 'gpg.format') ?? 'openpgp').toLowerCase();
  const signingKey = last(entries, 'user.signingkey');
  // The translated config names the public half of a key file (translateConfig); say so, or
  // that it is missing.
  if (format === 'ssh' && signingKey !== undefined && signingKey !== null && /^(~\/|\/)/.test(signingKey) && !signingKey.endsWith('.pub')) {
    const file = expandHome(signingKey, input.hostHome);
    const pub = `${file}.pub`;
    if (await input.publicKeyExists(pub)) {
      out.notices.push(`git: user.signingkey names the private key ${file}; the sandbox signs with ${pub} through the agent (private keys are never mounted)`);
    } else {
      out.warnings.push(`git: user.signingkey names the private key ${file} and ${pub} does not exist; private keys are never mounted, so signing fails in the sandbox (remedy: create ${pub} with \`ssh-keygen -y -f ${file} > ${pub}\`)`);
    }
  }
  if (!signs) return;
  if (format === 'ssh') out.sshSigning = true;
  else {
    out.warnings.push(
      `git: commits are signed with gpg.format=${format}, which cannot sign in the sandbox (no gpg agent is forwarded), so commits fail (remedy: sign with SSH keys, gpg.format=ssh, or commit with \`git -c commit.gpgsign=false\` in the sandbox)`,
    );
  }
}

/**
 * Without `core.excludesFile` or `core.attributesFile` git reads `git/ignore` and `git/attributes`
 * under `$XDG_CONFIG_HOME` (or `~/.config`), which in the container is the container's: name the
 * host's, mounted, for any user and HOME.
 */
function defaultFileOverrides(input: OverrideInput, out: Overrides): void {
  for (const { key, file } of input.xdgDefaults) {
    if (last(input.entries, key) !== undefined) continue;
    const value = input.sandboxPath(file);
    const [section = '', name = ''] = key.split('.');
    out.settings.push({ section, key: name, value });
    out.files.push({ key, file });
    out.notices.push(`git: ${key} is set to ${value} in the sandbox, where your ${file} is mounted, since git would look for it under the container's HOME`);
  }
}

/** ssh reads known_hosts from the passwd home, not $HOME, so name the mounted files for any user. */
function sshOverrides(input: OverrideInput, out: Overrides): void {
  const sshCommand = last(input.entries, 'core.sshcommand');
  const hostOnly = sshCommand !== undefined && sshCommand !== null && HOST_ONLY_PROGRAM.test(sshCommand);
  if (sshCommand !== undefined && !hostOnly) return;
  const knownHosts = input.knownHosts.length === 0 ? '' : ` -o UserKnownHostsFile=${shQuote(input.knownHosts.join(' '))}`;
  if (!hostOnly && knownHosts === '') return;
  const value = `ssh${knownHosts}`;
  out.settings.push({ section: 'core', key: 'sshCommand', value });
  out.notices.push(
    hostOnly
      ? `git: core.sshCommand "${sshCommand}" is a host program; the sandbox uses ${value}`
      : `git: core.sshCommand is set to "${value}" in the sandbox, so ssh trusts the hosts your known_hosts lists whatever the container user's HOME`,
  );
}

/** What the generated global config sets after the user's files, and why (DESIGN §8). */
export async function sandboxOverrides(input: OverrideInput): Promise<Overrides> {
  const out: Overrides = { settings: [], warnings: [], notices: [], files: [], sshSigning: false };
  credentialOverrides(input.entries, out);
  programOverrides(input.entries, out);
  defaultFileOverrides(input, out);
  await signingOverrides(input, out);
  sshOverrides(input, out);
  return out;
}
