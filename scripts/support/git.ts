/**
 * Git run as a user runs it, for the repositories tests and the bench make: no inherited `GIT_*`
 * variable, a fixed author, no system configuration and a home of its own, so nothing of the
 * machine's own git setup changes what a repository holds.
 */
import { execFileSync } from 'node:child_process';
import { tempDir } from './run-dir';

const ENV = {
  ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('GIT_'))),
  GIT_AUTHOR_NAME: 'Test User',
  GIT_AUTHOR_EMAIL: 'test@example.invalid',
  GIT_COMMITTER_NAME: 'Test User',
  GIT_COMMITTER_EMAIL: 'test@example.invalid',
  GIT_CONFIG_NOSYSTEM: '1',
  HOME: tempDir('git-home'),
};

/** Runs git in `cwd` as a user would; returns stdout. */
export function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', args, { cwd, env: ENV, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
}

export function gitBuffer(cwd: string, ...args: string[]): Buffer {
  return execFileSync('git', args, { cwd, env: ENV, maxBuffer: 64 * 1024 * 1024 });
}

/**
 * A commit on `parent` whose tree names one blob under `folders` x `files` paths
 * (`d<i>/f<j>`): a tree of hundreds of thousands of paths from a few kilobytes of objects.
 */
export function manyPathsCommit(cwd: string, parent: string, folders: number, files: number): string {
  const blob = execFileSync('git', ['hash-object', '-w', '--stdin'], { cwd, env: ENV, input: 'x\n' }).toString().trim();
  const mktree = (lines: string[]) =>
    execFileSync('git', ['mktree'], { cwd, env: ENV, input: lines.join('') })
      .toString()
      .trim();
  const folder = mktree(Array.from({ length: files }, (_, i) => `100644 blob ${blob}\tf${i}\n`));
  const root = mktree(Array.from({ length: folders }, (_, i) => `040000 tree ${folder}\td${i}\n`));
  return git(cwd, 'commit-tree', root, '-p', parent, '-m', 'many paths').trim();
}
