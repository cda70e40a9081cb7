/** One `key = value` of a config file sandboxd writes; a null value is a bare `key` (git's implicit true). */
export interface ConfigSetting {
  section: string;
  subsection?: string;
  key: string;
  value: string | null;
}

/** Names git accepts in a file: a section of letters, digits and `-`; a variable that starts with a letter. */
const SECTION = /^[A-Za-z0-9-]+$/;
const NAME = /^[A-Za-z][A-Za-z0-9-]*$/;

/**
 * A key as `git config --list` prints it (`section.subsection.name`, the subsection keeping its
 * case and any dots), split at the first and the last dot. null for what is not such a key.
 */
export function splitKey(key: string): Pick<ConfigSetting, 'section' | 'subsection' | 'key'> | null {
  const first = key.indexOf('.');
  const last = key.lastIndexOf('.');
  if (first <= 0 || last === key.length - 1) return null;
  const section = key.slice(0, first);
  const name = key.slice(last + 1);
  if (!SECTION.test(section) || !NAME.test(name)) return null;
  return first === last ? { section, key: name } : { section, subsection: key.slice(first + 1, last), key: name };
}

/**
 * A value as git reads it back: inside double quotes only `\` and `"` need escaping, and git turns
 * `\n`, `\t` and `\b` into newline, TAB and backspace; every other character, control characters
 * included (a lone CR too, since a quote or backslash always follows it), is kept as written.
 * null when git cannot hold it (NUL).
 */
export function quoteValue(value: string): string | null {
  if (value.includes('\0')) return null;
  const escaped = value.replaceAll('\\', '\\\\').replaceAll('"', '\\"').replaceAll('\n', '\\n').replaceAll('\t', '\\t').replaceAll('\b', '\\b');
  return `"${escaped}"`;
}

/**
 * A subsection name as git reads it back: git knows no escapes there but `\"` and `\\` (it reads
 * `\t` as `t`), so a TAB or any other control character is written as itself. null for a newline or
 * NUL, which no subsection can hold.
 */
export function quoteSubsection(subsection: string): string | null {
  if (/[\n\0]/.test(subsection)) return null;
  return `"${subsection.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`;
}

export interface RenderedConfig {
  text: string;
  /** Settings git could not read back as they are: left out, for the caller to name. */
  refused: ConfigSetting[];
}

/** Renders settings in order, opening a section whenever it changes, so git reads back exactly these. */
export function renderConfig(settings: readonly ConfigSetting[], comment: string): RenderedConfig {
  // A comment ends at the line's end: one line, whatever the caller put in it.
  const lines = [`# ${comment.replaceAll(/[\r\n]/g, ' ')}`];
  const refused: ConfigSetting[] = [];
  let open: string | null = null;
  for (const setting of settings) {
    const subsection = setting.subsection === undefined ? '' : quoteSubsection(setting.subsection);
    const value = setting.value === null ? '' : quoteValue(setting.value);
    if (subsection === null || value === null || !SECTION.test(setting.section) || !NAME.test(setting.key)) {
      refused.push(setting);
      continue;
    }
    const header = subsection === '' ? `[${setting.section}]` : `[${setting.section} ${subsection}]`;
    if (header !== open) lines.push(header);
    open = header;
    lines.push(setting.value === null ? `\t${setting.key}` : `\t${setting.key} = ${value}`);
  }
  return { text: `${lines.join('\n')}\n`, refused };
}
