/*
 * The plan's warning about an agent that is not forwarded, without zod: clients that only read
 * warnings (the llxprt adapter) load nothing more for it.
 */

/**
 * How a plan's warning about a skipped agent begins: the skip reason follows, then the remedy. A
 * client that prints the reason itself (`sandboxd run`) prints that warning as the remedy only.
 */
export const AGENT_NOT_FORWARDED = 'the ssh agent is not forwarded: ';

/**
 * What brings the agent into the container, as the shell that runs the client pastes it (sh, bash,
 * zsh): an agent of its own holding the default keys, named in SSH_AUTH_SOCK for what it runs next.
 */
export const AGENT_REMEDY = 'start an agent with your key in this shell: `eval "$(ssh-agent -s)" && ssh-add`, then run again';

/** A reason and a remedy as one warning: a reason that ends in its own punctuation gets no period. */
export function agentNotForwarded(reason: string, remedy: string): string {
  return `${AGENT_NOT_FORWARDED}${reason}${/[.?!]$/.test(reason) ? '' : '.'} ${remedy}`;
}
