import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { completionEntries } from '../../client/cli/commands/completion.js';
import { planNotices } from '../../client/cli/commands/run.js';
import { fitWidths } from '../../client/cli/output.js';
import { agentNotForwarded } from '../../shared/contracts/plan.js';
import { ERROR_SPECS } from '../../shared/errors.js';

describe('what a person reads from the CLI', () => {
  it('says why the agent was skipped once, with the remedy under it (the Docker engine down)', () => {
    const reason = 'the Docker engine did not answer `docker info`: Cannot connect to the Docker daemon at unix:///x.sock. Is the docker daemon running?';
    const remedy = 'Check that `docker info` works in your shell, or pass --ssh-agent off.';
    const text = planNotices({ status: 'skipped', reason }, [agentNotForwarded(reason, remedy), 'another warning']);
    expect(text).toBe(`sandboxd: ssh agent not forwarded: ${reason}\n  ${remedy}\nsandboxd: warning: another warning\n`);
    expect(text.split(reason)).toHaveLength(2);
    expect(text).not.toContain('?.');
    expect(planNotices({ status: 'skipped', reason: 'ssh-agent is off for this session' }, [])).toBe('sandboxd: ssh agent not forwarded: ssh-agent is off for this session\n');
  });

  it('a reason that ends in its own punctuation gets no second one', () => {
    expect(agentNotForwarded('is it running?', 'Start it.')).toBe('the ssh agent is not forwarded: is it running? Start it.');
    expect(agentNotForwarded('it is down', 'Start it.')).toBe('the ssh agent is not forwarded: it is down. Start it.');
  });

  it('remedies name options as they are typed', () => {
    for (const [code, spec] of Object.entries(ERROR_SPECS)) {
      // `pass ssh-agent auto`, an option without its dashes, cannot be pasted.
      expect({ code, remedy: spec.remedy }).not.toMatchObject({ remedy: expect.stringMatching(/pass (?!--)[a-z]+-[a-z]+ /) as string });
      expect({ code, remedy: spec.remedy }).not.toMatchObject({ remedy: expect.stringMatching(/schema/) as string });
    }
    expect(ERROR_SPECS.SSH_AGENT_UNAVAILABLE.remedy).toContain('--ssh-agent auto');
  });

  it('tables fit 100 columns by cutting the widest columns first; ids and short columns stay whole', () => {
    // tunnels ls: ID, KIND, CONNECTION, STATE, REFS, PID, RESTARTS, AGE, AGENT, SOCKET, LAST ERROR
    const natural = [16, 6, 22, 5, 4, 5, 8, 3, 60, 60, 40];
    // The id is pasted into `tunnels restart ID`: its floor is its own width.
    const floors = [16, 6, 10, 6, 6, 6, 8, 6, 6, 6, 10];
    const widths = fitWidths(natural, floors, 100);
    expect(widths.reduce((sum, width) => sum + width, 0) + 2 * (widths.length - 1)).toBeLessThanOrEqual(100);
    expect(widths.slice(0, 8)).toEqual([16, 6, 10, 5, 4, 5, 8, 3]);
    expect(fitWidths(natural, floors, Infinity)).toEqual(natural);
  });

  it('completion offers every command, subcommand, option and choice commander knows', () => {
    const program = new Command('sandboxd');
    program.command('run').option('--engine <engine>').option('-q, --quiet');
    program.command('tunnels').command('ls').option('--no-trunc');
    const entries = completionEntries(program);
    expect(entries.map((entry) => entry.key)).toEqual(['', 'run', 'tunnels', 'tunnels ls']);
    expect(entries[0]?.subcommands).toEqual(['run', 'tunnels']);
    expect(entries[1]?.options.map((option) => option.names)).toEqual([['--engine'], ['-q', '--quiet']]);
  });
});
