/**
 * The command line's side of a repository run (SPEC section 10): the repository, the base
 * commit and the task, checked before any workflow starts, with the same reading of the base
 * tree the worker does (host/repository.ts). Each refusal is one line naming what is wrong.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { RepoSource } from '../core/contracts';
import { SETTINGS_FILE, type RepoSettings } from '../core/repo-settings';
import { inspectBase } from '../host/repository';
import { resolveTarget } from '../host/connection';
import { CredentialsFileError, lookupCredentials } from '../host/credentials';
import { GitError, GitRepository } from '../host/git';
import type { Settings } from '../host/settings';
import { RefusedInput } from './command';
import type { RepositoryFacts } from '../core/activities';

export interface CheckedRepositoryRun {
  source: RepoSource;
  settings: RepoSettings | null;
  facts: RepositoryFacts;
}

/** The task's text: `--task TEXT` or the contents of `--task-file FILE`. */
export function taskText(task: string | undefined, taskFile: string | undefined): string {
  if (task !== undefined && taskFile !== undefined) throw new RefusedInput('give the task once: --task TEXT or --task-file FILE, not both');
  if (taskFile !== undefined) {
    let text: string;
    try {
      text = readFileSync(taskFile, 'utf8');
    } catch (err) {
      throw new RefusedInput(`cannot read the task file ${taskFile}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
    if (text.trim() === '') throw new RefusedInput(`the task file ${taskFile} is empty`);
    return text;
  }
  if (task === undefined || task.trim() === '') throw new RefusedInput('a repository run needs its task: --task TEXT or --task-file FILE');
  return task;
}

/**
 * The credentials file a repository's named credentials are checked against here: on the
 * embedded default the worker is started from this command's own settings, so its file is this
 * one; a cluster's workers have files of their own and check for themselves (loadRun), so null.
 */
export function localCredentialsFile(settings: Settings): string | null {
  try {
    return resolveTarget(settings).address === null ? settings.credentialsFile : null;
  } catch {
    return null; // a connection setting at fault: opening the session says which, next
  }
}

/**
 * Opens the repository, resolves `base` to a commit and reads what the base tree says; with
 * `credentialsFile`, the credentials its settings name must be ones that file lets it use
 * (core/egress.ts). Any fault is a RefusedInput. Nothing is written anywhere.
 */
export function checkRepositoryRun(o: {
  path: string;
  task: string;
  base?: string;
  id?: string;
  tests?: RepoSource['tests'];
  acceptance?: RepoSource['acceptance'];
  credentialsFile?: string | null;
}): CheckedRepositoryRun {
  let repo: GitRepository;
  let commit: string;
  try {
    repo = GitRepository.open(o.path);
    commit = repo.resolveCommit(o.base ?? 'HEAD');
  } catch (err) {
    if (err instanceof GitError && err.kind === 'unknown_ref' && o.base === undefined)
      throw new RefusedInput(`${o.path} has no commit yet (HEAD names none); commit something or give --base REF`);
    if (err instanceof GitError) throw new RefusedInput(err.kind === 'unknown_ref' ? `${err.message} in ${o.path}` : err.message);
    throw err;
  }
  const source: RepoSource = {
    path: resolve(o.path),
    base_commit: commit,
    task: o.task,
    ...(o.id ? { id: o.id } : {}),
    ...(o.tests ? { tests: o.tests } : {}),
    ...(o.acceptance ? { acceptance: o.acceptance } : {}),
  };
  // The settings' approver is checked there too (only one that asks a person): the worker's loadRun reads the same.
  const inspected = inspectBase(repo, source);
  if (!inspected.ok) throw new RefusedInput(inspected.detail);
  if (o.credentialsFile) {
    let found;
    try {
      found = lookupCredentials(o.credentialsFile, inspected.settings?.egress);
    } catch (err) {
      if (err instanceof CredentialsFileError) throw new RefusedInput(err.message);
      throw err;
    }
    if (!found.ok) throw new RefusedInput(`${SETTINGS_FILE}: ${found.detail}`);
  }
  return { source, settings: inspected.settings, facts: inspected.facts };
}
