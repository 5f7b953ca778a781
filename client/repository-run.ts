/**
 * The command line's side of a repository run (SPEC section 10): the repository, the base
 * commit and the task, checked before any workflow starts, with the same reading of the base
 * tree the worker does (workspace/repository.ts). Each refusal is one line naming what is wrong.
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import type { RepoSource } from '../core/contracts';
import Dockerode from 'dockerode';
import { imageAllowed, imageRefusal, SETTINGS_FILE, type RepoSettings } from '../core/repo-settings';
import { inspectBase, withRepository, type InspectedBase, type OpenRunner } from '../workspace/repository';
import { hostPath } from '../host/tools-env';
import { GitSandboxUnavailable, repositoryRunners, sandboxRefusal, type RepositoryRead } from '../sandbox/git-sandbox';
import { resolveTarget } from '../host/connection';
import { CredentialsFileError, lookupCredentials } from '../host/credentials';
import { GitError } from '../workspace/git';
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

/** Where this command reads repositories: the machine's git for a trusted one on local, a container otherwise. */
export function repositoryReaders(settings: Settings): (read: RepositoryRead) => OpenRunner {
  let docker: Dockerode | null;
  try {
    docker = new Dockerode();
  } catch {
    docker = null; // a malformed DOCKER_HOST: no engine to read in
  }
  return repositoryRunners({ docker, image: settings.gitImage, path: hostPath(settings), limits: settings.repositoryLimits });
}

/**
 * Opens the repository (where `read` says), resolves `base` to a commit and reads what the base
 * tree says; with `credentialsFile`, the credentials its settings name must be ones that file
 * lets it use (core/egress.ts); the image its settings name must be one `allowedImages` lists.
 * Any fault is a RefusedInput. Nothing is written anywhere.
 */
export async function checkRepositoryRun(o: {
  path: string;
  task: string;
  base?: string;
  id?: string;
  tests?: RepoSource['tests'];
  acceptance?: RepoSource['acceptance'];
  credentialsFile?: string | null;
  settings: Settings;
  read: RepositoryRead;
  /** The user's own `--image`: then the settings' image is not used, and not checked. */
  image?: string;
}): Promise<CheckedRepositoryRun> {
  let inspected: InspectedBase;
  let source: RepoSource;
  try {
    [source, inspected] = await withRepository(repositoryReaders(o.settings)(o.read), o.path, o.settings.repositoryLimits, async (repo) => {
      const found: RepoSource = {
        path: resolve(o.path),
        base_commit: await repo.resolveCommit(o.base ?? 'HEAD'),
        task: o.task,
        ...(o.id ? { id: o.id } : {}),
        ...(o.tests ? { tests: o.tests } : {}),
        ...(o.acceptance ? { acceptance: o.acceptance } : {}),
      };
      // The settings' approver is checked there too (only one that asks a person): the worker's loadRun reads the same.
      return [found, await inspectBase(repo, found)] as const;
    });
  } catch (err) {
    if (err instanceof GitSandboxUnavailable) throw new RefusedInput(sandboxRefusal(err));
    if (err instanceof GitError && err.kind === 'unknown_ref' && o.base === undefined)
      throw new RefusedInput(`${o.path} has no commit yet (HEAD names none); commit something or give --base REF`);
    if (err instanceof GitError && err.kind === 'too_large') throw new RefusedInput(`too_large: ${err.message}`);
    if (err instanceof GitError) throw new RefusedInput(err.kind === 'unknown_ref' ? `${err.message} in ${o.path}` : err.message);
    throw err;
  }
  if (!inspected.ok) throw new RefusedInput(inspected.detail);
  const image = inspected.settings?.image;
  if (image && o.image === undefined && !imageAllowed(image, o.settings.allowedImages)) throw new RefusedInput(imageRefusal(image));
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
