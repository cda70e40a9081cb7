import { Argument, type Command } from 'commander';
import { runAction } from '../output.js';

export const SHELLS = ['bash', 'zsh', 'fish'] as const;
export type Shell = (typeof SHELLS)[number];

/** One command line position's words: a command (`run`, `tunnels ls`), its subcommands (or its argument's choices) and options. */
export interface CompletionEntry {
  key: string;
  subcommands: string[];
  options: { names: string[]; choices: string[] }[];
}

/** The words of every command as commander knows them, so completion never drifts from the CLI. */
export function completionEntries(program: Command): CompletionEntry[] {
  const entries: CompletionEntry[] = [];
  const visit = (command: Command, key: string): void => {
    entries.push({
      key,
      subcommands: [...command.commands.map((sub) => sub.name()).filter((name) => name !== 'help'), ...command.registeredArguments.flatMap((argument) => argument.argChoices ?? [])],
      options: command.options.map((option) => ({
        names: [option.short, option.long].filter((name): name is string => name !== undefined),
        choices: option.argChoices ?? [],
      })),
    });
    for (const sub of command.commands) visit(sub, key === '' ? sub.name() : `${key} ${sub.name()}`);
  };
  visit(program, '');
  return entries;
}

/** Single-quoted for the shells, which all read `'…'` literally; the words are sandboxd's own. */
function quoted(words: readonly string[]): string {
  return `'${words.join(' ')}'`;
}

function bash(entries: readonly CompletionEntry[]): string {
  const groups = entries.filter((entry) => entry.key !== '' && entry.subcommands.length > 0).map((entry) => entry.key);
  const words = entries.map((entry) => `    ${quoted([entry.key])}) words=${quoted([...entry.subcommands, ...entry.options.flatMap((option) => option.names)])} ;;`);
  const choices = entries.flatMap((entry) => entry.options.filter((option) => option.choices.length > 0)).map((option) => `    ${option.names.join('|')}) COMPREPLY=($(compgen -W ${quoted(option.choices)} -- "$cur")); return ;;`);
  return `# sandboxd completion for bash: source <(sandboxd completion bash)
_sandboxd() {
  local cur=\${COMP_WORDS[COMP_CWORD]} prev=\${COMP_WORDS[COMP_CWORD-1]} key='' words i
  case "$prev" in
${[...new Set(choices)].join('\n')}
  esac
  for ((i = 1; i < COMP_CWORD; i++)); do
    case "\${COMP_WORDS[i]}" in
      --) return ;;
      -*) ;;
      *) if [ -z "$key" ]; then key=\${COMP_WORDS[i]}; else case "$key" in ${groups.map((group) => quoted([group])).join('|') || "''"}) key="$key \${COMP_WORDS[i]}" ;; esac; fi ;;
    esac
  done
  case "$key" in
${words.join('\n')}
    *) words='' ;;
  esac
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -F _sandboxd sandboxd
`;
}

function zsh(entries: readonly CompletionEntry[]): string {
  return `#compdef sandboxd
# sandboxd completion for zsh: source <(sandboxd completion zsh)
autoload -U +X bashcompinit && bashcompinit
${bash(entries).split('\n').slice(1).join('\n')}`;
}

function fish(entries: readonly CompletionEntry[]): string {
  const lines = ['# sandboxd completion for fish: sandboxd completion fish | source', 'complete -c sandboxd -f'];
  for (const entry of entries) {
    const path = entry.key === '' ? [] : entry.key.split(' ');
    const condition = path.length === 0 ? '__fish_use_subcommand' : `__fish_seen_subcommand_from ${path.at(-1) ?? ''}`;
    for (const sub of entry.subcommands) lines.push(`complete -c sandboxd -n '${condition}' -a ${sub}`);
    for (const option of entry.options) {
      const long = option.names.find((name) => name.startsWith('--'));
      const short = option.names.find((name) => !name.startsWith('--'));
      const flags = [...(long === undefined ? [] : [`-l ${long.slice(2)}`]), ...(short === undefined ? [] : [`-s ${short.slice(1)}`])];
      if (flags.length === 0) continue;
      lines.push(`complete -c sandboxd -n '${condition}' ${flags.join(' ')}${option.choices.length === 0 ? '' : ` -xa ${quoted(option.choices)}`}`);
    }
  }
  return `${lines.join('\n')}\n`;
}

export function completionScript(shell: Shell, program: Command): string {
  const entries = completionEntries(program);
  return { bash, zsh, fish }[shell](entries);
}

export function registerCompletionCommand(program: Command): void {
  program
    .command('completion')
    .description('print shell completion: source <(sandboxd completion bash), zsh likewise, fish: | source')
    .addArgument(new Argument('<shell>', 'bash, zsh or fish').choices(SHELLS))
    .action(async (shell: Shell) => {
      await runAction(false, () => {
        process.stdout.write(completionScript(shell, program));
        return Promise.resolve(0);
      });
    });
}
