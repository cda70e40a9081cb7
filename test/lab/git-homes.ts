import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { execa } from 'execa';

/**
 * A realistic global git config, for comparing what git says on the host with what it says in the
 * sandbox: an include chain (`~/`, then relative), `includeIf` by directory with `~/`, `gitdir/i:`
 * and `./`, by branch and by remote URL, an include that does not exist, the XDG config file, SSH
 * signing with a `~/` key path and allowed signers, `insteadOf`, a `!` alias, excludes and
 * attributes files, a commit template and a `~/` safe.directory. Each email names the file that
 * set it, so an identity says which include won.
 */
export function writeRealisticHome(home: string, signingPublicKey: string): void {
  const files: Record<string, string> = {
    '.gitconfig': [
      '[include]',
      '\tpath = ~/.config/git/identity',
      '[includeIf "gitdir:~/src/work/"]',
      '\tpath = ~/.config/git/work',
      '[includeIf "gitdir/i:~/SRC/Client/"]',
      '\tpath = client.inc',
      '[includeIf "gitdir:./src/dotrel/"]',
      '\tpath = .config/git/dotrel',
      '[includeIf "hasconfig:remote.*.url:https://github.com/acme/**"]',
      '\tpath = ~/.config/git/acme',
      '[includeIf "onbranch:release/**"]',
      '\tpath = ~/.config/git/release',
      '[include]',
      '\tpath = ~/.config/git/absent',
      '[core]',
      '\texcludesFile = ~/.config/git/ignore-extra',
      '\tattributesFile = ~/.gitattributes',
      '[commit]',
      '\ttemplate = ~/.config/git/template',
      '\tgpgSign = true',
      '[gpg]',
      '\tformat = ssh',
      '[gpg "ssh"]',
      '\tallowedSignersFile = ~/.ssh/allowed_signers',
      '[user]',
      '\tsigningKey = ~/.ssh/signing.pub',
      '[url "git@github.com:"]',
      '\tinsteadOf = https://github.com/',
      '[alias]',
      '\twho = "!f() { i=$(git var GIT_AUTHOR_IDENT); echo \\"alias: ${i%>*}>\\"; }; f"',
      '\tst = status --short',
      '[init]',
      '\tdefaultBranch = main',
      '[safe]',
      '\tdirectory = ~/src/trusted',
      '',
    ].join('\n'),
    '.config/git/config': '[color]\n\tui = auto\n[pull]\n\trebase = true\n',
    '.config/git/identity': '[user]\n\tname = Inc User\n\temail = i@x.test\n[include]\n\tpath = more/deep.inc\n',
    '.config/git/more/deep.inc': '[diff]\n\talgorithm = histogram\n',
    '.config/git/work': '[user]\n\temail = work@x.test\n',
    'client.inc': '[user]\n\temail = client@x.test\n',
    '.config/git/dotrel': '[user]\n\temail = dotrel@x.test\n',
    '.config/git/acme': '[user]\n\temail = acme@x.test\n',
    '.config/git/release': '[user]\n\temail = release@x.test\n',
    '.config/git/ignore-extra': '*.secret\n',
    '.gitattributes': '*.bin binary\n',
    '.config/git/template': 'template from the host\n',
    '.ssh/signing.pub': signingPublicKey,
    '.ssh/allowed_signers': `*@x.test ${signingPublicKey}`,
  };
  for (const [name, content] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(home, name)), { recursive: true });
    writeFileSync(path.join(home, name), content);
  }
}

/** The repositories, by what their path or remote makes the config include. */
export const REPOS = {
  work: 'src/work/app',
  client: 'src/client/app',
  dotrel: 'src/dotrel/app',
  acme: 'src/acme/app',
  plain: 'src/plain/app',
} as const;

export type RepoName = keyof typeof REPOS;

/** The email each repository's identity must have on the host (its branch is `main`). */
export const EXPECTED_EMAIL: Record<RepoName, string> = {
  work: 'work@x.test',
  client: 'client@x.test',
  dotrel: 'dotrel@x.test',
  acme: 'acme@x.test',
  plain: 'i@x.test',
};

/** Creates the repositories under the home with one commit each, not signed and by nobody in the config. */
export async function makeRepos(home: string): Promise<Record<RepoName, string>> {
  const env = { HOME: '/nonexistent', GIT_CONFIG_NOSYSTEM: '1', PATH: process.env.PATH ?? '' };
  const dirs = {} as Record<RepoName, string>;
  for (const [name, relative] of Object.entries(REPOS) as [RepoName, string][]) {
    const dir = path.join(home, relative);
    mkdirSync(dir, { recursive: true });
    const git = (...args: string[]) => execa('git', args, { cwd: dir, env });
    await git('init', '-q', '-b', 'main');
    writeFileSync(path.join(dir, 'file.txt'), 'hello\n');
    await git('add', '.');
    await git('-c', 'user.name=Setup', '-c', 'user.email=setup@example.com', 'commit', '-q', '-m', 'init');
    if (name === 'acme') await git('remote', 'add', 'origin', 'https://github.com/acme/tool');
    dirs[name] = dir;
  }
  return dirs;
}

/**
 * What the comparison looks at, run the same way on the host and in the sandbox (busybox sh is
 * enough): the config as git lists it, the content of each file a path-valued key names, the
 * identity, a `!` alias, an `insteadOf` rewrite, and the excludes and attributes files at work.
 */
export const COMPARE_SCRIPT = [
  'echo @list',
  'git config --list --show-scope',
  'echo @paths',
  'for k in core.excludesfile core.attributesfile commit.template gpg.ssh.allowedsignersfile user.signingkey; do f=$(git config --type=path --get $k) && echo "$k=$(cat "$f" 2>&1)"; done',
  'echo @ident',
  'i=$(git var GIT_AUTHOR_IDENT); echo "${i%>*}>"',
  'echo @alias',
  'git who',
  'echo @url',
  'git ls-remote --get-url https://github.com/acme/tool',
  'echo @ignored',
  'touch x.secret x.bin && git check-ignore x.secret; git check-attr binary -- x.bin; rm -f x.secret x.bin',
].join('; ');

/** Keys whose values differ by design: git's include directives (what they include is compared) and the sandbox's overrides. */
const NOT_COMPARED = /^(include\.path|includeif\..*|safe\.directory|core\.sshcommand)=/;
/** Path-valued keys: the text differs, the file behind it is compared under @paths. */
const PATH_VALUED = /^(core\.excludesfile|core\.attributesfile|commit\.template|gpg\.ssh\.allowedsignersfile|user\.signingkey)=/;

/** The script's output in a form that must be equal on both sides; `safe` lists the safe.directory values apart. */
export function comparable(output: string): { sections: Record<string, string[]>; safe: string[] } {
  const sections: Record<string, string[]> = {};
  const safe: string[] = [];
  let current = '';
  for (const line of output.split('\n')) {
    if (line.startsWith('@')) {
      current = line.slice(1);
      sections[current] = [];
      continue;
    }
    if (current === 'list') {
      const [scope = '', entry = ''] = line.split('\t');
      if (scope !== 'global' && scope !== 'local') continue;
      if (entry.startsWith('safe.directory=')) safe.push(entry.slice('safe.directory='.length));
      if (NOT_COMPARED.test(entry)) continue;
      sections.list?.push(`${scope}\t${PATH_VALUED.test(entry) ? `${entry.split('=')[0] ?? ''}=<path>` : entry}`);
      continue;
    }
    sections[current]?.push(line);
  }
  return { sections, safe };
}
