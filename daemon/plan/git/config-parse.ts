/**
 * Git's config file syntax, read the way git's own parser (config.c) reads it, without running
 * git: the repository's config decides what is protected, so it must be read even when git
 * cannot or must not be asked. A file git would refuse is refused here too (`error`).
 */

export interface ConfigEntry {
  /** Lower case; empty for a key before any section header. */
  section: string;
  /** As written in `[section "sub"]` (case kept); lower case in the legacy `[section.sub]`; null when absent. */
  subsection: string | null;
  /** Lower case. */
  key: string;
  /** null for a bare `key` line (boolean true). */
  value: string | null;
  /** 1-based line of the key. */
  line: number;
}

export type ParsedConfig = { entries: ConfigEntry[]; error: null } | { entries: ConfigEntry[]; error: { line: number } };

const isKeyChar = (c: string): boolean => /^[A-Za-z0-9-]$/.test(c);
const isSpace = (c: string): boolean => c === ' ' || c === '\t' || c === '\n' || c === '\r' || c === '\v' || c === '\f';

class ConfigError extends Error {}

/** A cursor over the text with git's `get_next_char`: CRLF is one newline, the end reads as one. */
class Source {
  private at = 0;
  line = 1;
  eof = false;

  constructor(private readonly text: string) {}

  next(): string {
    if (this.at >= this.text.length) {
      this.eof = true;
      return '\n';
    }
    let c = this.text[this.at++] ?? '\n';
    if (c === '\r' && this.text[this.at] === '\n') c = this.text[this.at++] ?? '\n';
    if (c === '\0') throw new ConfigError();
    if (c === '\n') this.line += 1;
    return c;
  }
}

function parseValue(source: Source): string {
  let value = '';
  let quote = false;
  let comment = false;
  let space = 0;
  for (;;) {
    const c = source.next();
    if (c === '\n') {
      if (quote) throw new ConfigError();
      return value;
    }
    if (comment) continue;
    if (isSpace(c) && !quote) {
      if (value.length > 0) space += 1;
      continue;
    }
    if (!quote && (c === ';' || c === '#')) {
      comment = true;
      continue;
    }
    value += ' '.repeat(space);
    space = 0;
    if (c === '\\') {
      const escaped = source.next();
      const replacement = { '\n': '', t: '\t', b: '\b', n: '\n', '\\': '\\', '"': '"' }[escaped];
      if (replacement === undefined) throw new ConfigError();
      value += replacement;
      continue;
    }
    if (c === '"') {
      quote = !quote;
      continue;
    }
    value += c;
  }
}

/** After `[`: `name]`, `name.sub]` (legacy) or `name "sub"]`. Returns [section, subsection]. */
function parseHeader(source: Source): [string, string | null] {
  let name = '';
  for (;;) {
    const c = source.next();
    if (source.eof) throw new ConfigError();
    if (c === ']') break;
    if (isSpace(c)) return [checkedSection(name), parseExtendedSubsection(source, c)];
    if (!isKeyChar(c) && c !== '.') throw new ConfigError();
    name += c.toLowerCase();
  }
  const dot = name.indexOf('.');
  return dot === -1 ? [checkedSection(name), null] : [checkedSection(name.slice(0, dot)), name.slice(dot + 1)];
}

function checkedSection(name: string): string {
  if (name.length === 0) throw new ConfigError();
  return name;
}

function parseExtendedSubsection(source: Source, first: string): string {
  let c = first;
  while (isSpace(c)) {
    if (c === '\n') throw new ConfigError();
    c = source.next();
  }
  if (c !== '"') throw new ConfigError();
  let subsection = '';
  for (;;) {
    let d = source.next();
    if (d === '\n') throw new ConfigError();
    if (d === '"') break;
    if (d === '\\') {
      d = source.next();
      if (d === '\n') throw new ConfigError();
    }
    subsection += d;
  }
  if (source.next() !== ']') throw new ConfigError();
  return subsection;
}

export function parseConfigText(input: string): ParsedConfig {
  const text = input.startsWith('\uFEFF') ? input.slice(1) : input;
  const source = new Source(text);
  const entries: ConfigEntry[] = [];
  let section: [string, string | null] | null = null;
  let comment = false;
  try {
    for (;;) {
      const c = source.next();
      if (c === '\n') {
        if (source.eof) return { entries, error: null };
        comment = false;
        continue;
      }
      if (comment || isSpace(c)) continue;
      if (c === '#' || c === ';') {
        comment = true;
        continue;
      }
      if (c === '[') {
        section = parseHeader(source);
        continue;
      }
      if (!/^[A-Za-z]$/.test(c)) throw new ConfigError();
      const line = source.line;
      let key = c.toLowerCase();
      let d = source.next();
      while (!source.eof && isKeyChar(d)) {
        key += d.toLowerCase();
        d = source.next();
      }
      while (d === ' ' || d === '\t') d = source.next();
      let value: string | null = null;
      if (d !== '\n') {
        if (d !== '=') throw new ConfigError();
        value = parseValue(source);
      }
      // Git reads a key before any section too (it names no section then).
      entries.push({ section: section?.[0] ?? '', subsection: section?.[1] ?? null, key, value, line });
      if (source.eof) return { entries, error: null };
    }
  } catch (error) {
    if (error instanceof ConfigError) return { entries, error: { line: source.line } };
    throw error;
  }
}

/** `section.subsection.key` as `git config --list` prints it. */
export function entryName(entry: ConfigEntry): string {
  if (entry.section === '') return entry.key;
  return entry.subsection === null ? `${entry.section}.${entry.key}` : `${entry.section}.${entry.subsection}.${entry.key}`;
}

/** The last value of a two-level key (git's "last one wins"); a bare key reads as "true". */
export function lastValue(entries: readonly ConfigEntry[], section: string, key: string): string | null {
  let found: string | null = null;
  for (const entry of entries) {
    if (entry.section === section && entry.subsection === null && entry.key === key) found = entry.value ?? 'true';
  }
  return found;
}
