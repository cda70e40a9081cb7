/*
 * Which module registers each command. The `sandboxd` entry reads this to load one command's
 * bundle and nothing else, which keeps each start short; it imports nothing, so the entry stays a few hundred bytes.
 */

/**
 * One per file in entries/. Beside the command modules, `all` registers every command (help,
 * unknown names, and `completion`, which lists them) and `bare` none (`--version`, which loads
 * nothing else).
 */
export type CommandModule = 'daemon' | 'lifecycle' | 'status' | 'lists' | 'plan' | 'run' | 'install' | 'doctor' | 'logs' | 'version' | 'all' | 'bare';

const MODULE_OF: Readonly<Record<string, CommandModule>> = {
  daemon: 'daemon',
  start: 'lifecycle',
  stop: 'lifecycle',
  restart: 'lifecycle',
  status: 'status',
  sessions: 'lists',
  tunnels: 'lists',
  plan: 'plan',
  run: 'run',
  install: 'install',
  uninstall: 'install',
  doctor: 'doctor',
  logs: 'logs',
  version: 'version',
  completion: 'all',
};

/** `--version` needs no command; help, options first and unknown names need them all. */
export function moduleFor(first: string | undefined): CommandModule {
  if (first === '-V' || first === '--version') return 'bare';
  return (first === undefined ? undefined : MODULE_OF[first]) ?? 'all';
}
