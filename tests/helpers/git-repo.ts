/**
 * Real git repositories for tests, made with the ordinary git commands a user runs, and a
 * byte-for-byte picture of everything a run must leave alone: the working tree (modes and links
 * included), the index, HEAD and every ref.
 */
import {
  chmodSync,
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { git, gitBuffer } from '../../scripts/support/git';
import { PROJECT_ROOT, tempDir } from '../../scripts/support/run-dir';

export { git, gitBuffer };

export const SQLPARSE = join(PROJECT_ROOT, 'fixtures', 'py-sqlparse-dotted-real-name');

/** Bytes of a small binary file (NUL bytes, invalid UTF-8). */
export const BINARY = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0xff, 0xfe, 0x00, 0x01]);

export interface SampleRepo {
  dir: string;
  /** The commit HEAD points to (the default base). */
  head: string;
  first: string;
}

/**
 * A repository made from a fixture's `repo/` in two commits, then left the way a working copy
 * usually is: an ignored file, an untracked file, a staged change and an unstaged one. The
 * second commit adds an executable script, a non-executable one (a run may make it executable),
 * a symlink inside the tree and one pointing out of it, a binary file, AGENTS.md and `extra`.
 */
export function sampleRepo(fixtureDir: string, extra: Record<string, string> = {}, o: { submodule?: boolean } = {}): SampleRepo {
  const dir = join(tempDir('user-repo'), 'project');
  mkdirSync(dir);
  git(dir, 'init', '-q', '-b', 'main');
  cpSync(join(fixtureDir, 'repo'), dir, { recursive: true });
  git(dir, 'add', '-A');
  git(dir, 'commit', '-q', '-m', 'upstream tree');
  const first = git(dir, 'rev-parse', 'HEAD').trim();
  git(dir, 'tag', 'v0.1');
  git(dir, 'tag', '-a', '-m', 'first release', 'v0.1-annotated');

  mkdirSync(join(dir, 'tools'), { recursive: true });
  writeFileSync(join(dir, 'tools', 'check.sh'), '#!/bin/sh\necho checked\n');
  chmodSync(join(dir, 'tools', 'check.sh'), 0o755);
  writeFileSync(join(dir, 'tools', 'gen.sh'), '#!/bin/sh\necho generated\n');
  chmodSync(join(dir, 'tools', 'gen.sh'), 0o644);
  symlinkSync('check.sh', join(dir, 'tools', 'check.link'));
  symlinkSync('/etc/passwd', join(dir, 'tools', 'outside.link'));
  mkdirSync(join(dir, 'assets'), { recursive: true });
  writeFileSync(join(dir, 'assets', 'logo.bin'), BINARY);
  writeFileSync(join(dir, 'AGENTS.md'), '# Notes for agents\n\nRun the tests with `python3 -m pytest -q`. Keep changes small.\n');
  writeFileSync(join(dir, '.gitignore'), '*.log\nbuild/\n');
  for (const [path, text] of Object.entries(extra)) {
    mkdirSync(join(dir, path, '..'), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  git(dir, 'add', '-A');
  // A submodule as git records it: a commit id in the tree (its own repository is not needed).
  if (o.submodule) git(dir, 'update-index', '--add', '--cacheinfo', `160000,${first},vendor/lib`);
  git(dir, 'commit', '-q', '-m', 'tools, assets and notes');
  const head = git(dir, 'rev-parse', 'HEAD').trim();

  writeFileSync(join(dir, 'debug.log'), 'ignored: never in a workspace\n');
  mkdirSync(join(dir, 'build'));
  writeFileSync(join(dir, 'build', 'out.txt'), 'ignored too\n');
  writeFileSync(join(dir, 'untracked-notes.txt'), 'untracked: never in a workspace\n');
  writeFileSync(join(dir, '.gitignore'), `${readFileSync(join(dir, '.gitignore'), 'utf8')}*.tmp\n`);
  writeFileSync(join(dir, 'staged-new.txt'), 'staged, never committed\n');
  git(dir, 'add', '.gitignore', 'staged-new.txt');
  writeFileSync(join(dir, 'AGENTS.md'), `${readFileSync(join(dir, 'AGENTS.md'), 'utf8')}An unstaged line.\n`);
  return { dir, head, first };
}

const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

/**
 * Everything of a repository a run must not touch, as one comparable value: every working-tree
 * entry (mode, link target or content digest; `.git` excluded), the index file's bytes, HEAD,
 * every ref with its value, and the packed refs.
 */
export function repoPicture(dir: string, gitDir = join(dir, '.git')): Record<string, string> {
  const picture: Record<string, string> = {};
  const walk = (rel: string) => {
    for (const name of readdirSync(join(dir, rel)).sort()) {
      const path = rel ? `${rel}/${name}` : name;
      if (path === '.git') continue;
      const abs = join(dir, path);
      const st = lstatSync(abs);
      if (st.isSymbolicLink()) picture[`tree:${path}`] = `link ${readlinkSync(abs)}`;
      else if (st.isDirectory()) {
        picture[`tree:${path}/`] = `dir ${(st.mode & 0o777).toString(8)}`;
        walk(path);
      } else picture[`tree:${path}`] = `${(st.mode & 0o777).toString(8)} ${sha(readFileSync(abs))}`;
    }
  };
  if (existsSync(dir) && dir !== gitDir) walk('');
  for (const f of ['index', 'HEAD', 'packed-refs', 'ORIG_HEAD', 'FETCH_HEAD']) {
    if (existsSync(join(gitDir, f))) picture[`git:${f}`] = sha(readFileSync(join(gitDir, f)));
  }
  for (const line of git(dir === gitDir ? gitDir : dir, 'for-each-ref', '--format=%(refname) %(objectname)')
    .split('\n')
    .filter(Boolean)) {
    const [ref, oid] = line.split(' ');
    picture[`ref:${ref}`] = oid;
  }
  return picture;
}

/** The loose and packed objects of a repository, by name: what a command added is the difference. */
export function objectNames(gitDir: string): Set<string> {
  const names = new Set<string>();
  const objects = join(gitDir, 'objects');
  for (const d of readdirSync(objects)) {
    if (/^[0-9a-f]{2}$/.test(d)) for (const f of readdirSync(join(objects, d))) names.add(d + f);
    if (d === 'pack') for (const f of readdirSync(join(objects, d))) names.add(`pack/${f}`);
  }
  return names;
}
