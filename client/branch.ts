/**
 * A completed repository run's verified change, back in the user's repository (SPEC section 10):
 * as a branch (one commit on the base commit, made on a temporary index, created by one
 * update-ref whose expected old value is the null id) or as a patch for `git apply` (made in a
 * temporary object folder, so the repository gets nothing). The working tree, the index, HEAD
 * and every other ref stay as they are; a refusal changes nothing.
 */
import { runInputSchema, type ParsedRunInput } from '../core/contracts';
import { repositoryRead } from '../core/repo-settings';
import { withRepository } from '../workspace/repository';
import { readVerifiedChange, VerifiedChangeError, type ChangeEntryWithBytes, type VerifiedChange } from '../workspace/verified-change';
import { runPaths } from '../workspace/workspace';
import { commitToBranch, GitError, hostGit, RepositoryWriter, type GitRepository } from '../workspace/git';
import { hostPath } from '../host/tools-env';
import { GitSandboxUnavailable, sandboxRefusal, type RepositoryRead } from '../sandbox/git-sandbox';
import { repositoryReaders } from './repository-run';
import type { Session } from './session';

/** Why no branch or patch comes of a run: exit status 1, with this line. */
export class NoBranch extends Error {
  override name = 'NoBranch';
}

interface RunChange {
  /** The repository folder, and where it is read (the run's own trust decides). */
  path: string;
  read: RepositoryRead;
  /** The verified change as the run's activity kept it, its one source: base commit, entries, bytes. */
  change: VerifiedChange<ChangeEntryWithBytes>;
  message: string;
}

/** The commit message: the run's final summary, then the trailers that name the run and the model. */
export function commitMessage(summary: string, workflowId: string, model: string): string {
  const text = summary.trim() === '' ? `Change made by coding-agent run ${workflowId}` : summary.trim();
  return `${text}\n\nAgent-Run: ${workflowId}\nAgent-Model: ${model}\n`;
}

/**
 * The verified change of a completed repository run, or a NoBranch naming why there is none.
 * `anyEnd`: of a run that ended otherwise too, once verified (a batch's predictions file); null
 * when it was never verified (it ended before).
 */
async function runChange(session: Session, workflowId: string): Promise<RunChange>;
async function runChange(session: Session, workflowId: string, anyEnd: true): Promise<RunChange | null>;
async function runChange(session: Session, workflowId: string, anyEnd = false): Promise<RunChange | null> {
  const { runHandle, startInput, isRunning, runOutcome } = await import('./run-access');
  const handle = runHandle(session.client, workflowId);
  const raw = await startInput(handle);
  if (raw === null) throw new NoBranch(`no run ${workflowId}`);
  if (await isRunning(handle)) throw new NoBranch(`${workflowId} is still running: a branch comes from a completed run`);
  const outcome = await runOutcome(handle);
  if (anyEnd && outcome.state.verification === null) return null;
  const { status, reason } = outcome.record;
  if (status !== 'completed' && !anyEnd)
    throw new NoBranch(
      `${workflowId} ended ${status}${reason ? ` (${reason})` : ''}: only a completed run's verified change becomes a branch`,
    );
  const parsed = runInputSchema.safeParse(raw);
  const input: ParsedRunInput | null = parsed.success ? parsed.data : null;
  if (!input?.repo) throw new NoBranch(`${workflowId} is not a repository run: its change has no repository to go back to`);
  let change;
  try {
    change = readVerifiedChange(runPaths(session.settings.stateDir, outcome.state.run_id));
  } catch (err) {
    if (err instanceof VerifiedChangeError) throw new NoBranch(err.message);
    throw err;
  }
  // A state folder of another run of the same id is not this run's change.
  if (change.base_commit !== input.repo.base_commit)
    throw new NoBranch(`the kept change of ${workflowId} is on ${change.base_commit}, not on the run's base ${input.repo.base_commit}`);
  const model = input.source.kind === 'provider' ? input.source.model : `replay:${outcome.record.replay ?? 'unknown'}`;
  return {
    path: input.repo.path,
    read: repositoryRead(input.backend, input.repo.trusted),
    change,
    message: commitMessage(change.summary, workflowId, model),
  };
}

/**
 * Runs `fn` on the run's repository, read where the run's trust says; a repository that is gone,
 * whose base is gone or that cannot be read is a NoBranch naming why.
 */
async function onRepository<T>(session: Session, run: RunChange, fn: (repo: GitRepository) => Promise<T>): Promise<T> {
  try {
    return await withRepository(
      repositoryReaders(session.settings)(run.read),
      run.path,
      session.settings.repositoryLimits,
      async (repo) => {
        await repo.resolveCommit(run.change.base_commit);
        return fn(repo);
      },
    );
  } catch (err) {
    if (err instanceof GitSandboxUnavailable) throw new NoBranch(sandboxRefusal(err));
    if (err instanceof GitError && err.kind !== 'ref_exists' && err.kind !== 'bad_ref_name')
      throw new NoBranch(`${run.path}: ${err.message}`);
    throw err;
  }
}

/** Creates `name` (default `agent/<workflow-id>`) at one new commit on the run's base; refuses a name that exists. */
export async function branchFromRun(
  session: Session,
  workflowId: string,
  name?: string,
): Promise<{ branch: string; ref: string; commit: string; base: string; paths: string[] }> {
  const branch = name ?? `agent/${workflowId}`;
  const run = await runChange(session, workflowId);
  const settings = session.settings;
  const writer = hostGitFor(settings, run.path);
  try {
    const repository = await RepositoryWriter.open(writer, settings.repositoryLimits, run.path);
    const { ref, commit } = await onRepository(session, run, (repo) =>
      commitToBranch(repo, repository, {
        change: run.change,
        message: run.message,
        name: branch,
        reason: `coding-agent: branch from run ${workflowId}`,
        maxPackBytes: settings.repositoryLimits.bytes,
      }),
    );
    return { branch, ref, commit, base: run.change.base_commit, paths: run.change.changes.map((c) => c.path) };
  } catch (err) {
    if (err instanceof GitError && (err.kind === 'ref_exists' || err.kind === 'bad_ref_name')) {
      throw new NoBranch(err.kind === 'bad_ref_name' && name === undefined ? `${err.message}: give one with --name NAME` : err.message);
    }
    if (err instanceof GitError) throw new NoBranch(`${run.path}: ${err.message}`);
    throw err;
  } finally {
    await writer.close();
  }
}

/** The machine's git on the user's repository, for the one thing it writes there: a branch. */
function hostGitFor(settings: Session['settings'], path: string) {
  const l = settings.repositoryLimits;
  return hostGit(path, { path: hostPath(settings), idleMs: l.idle_s * 1000, totalMs: l.read_s * 1000 });
}

/** The run's verified change as a patch that `git apply` takes, with nothing written to the repository. */
export async function patchFromRun(session: Session, workflowId: string): Promise<string> {
  const run = await runChange(session, workflowId);
  return onRepository(session, run, (repo) => repo.patch(run.change, run.message));
}

/**
 * The change a repository run's verifier saw, completed or not, as a patch (a batch's predictions
 * file); '' when the run was never verified (it ended before). A NoBranch says why there is none
 * where there should be one (its state folder is not on this machine, say).
 */
export async function verifiedPatch(session: Session, workflowId: string): Promise<string> {
  const run = await runChange(session, workflowId, true);
  if (run === null || run.change.changes.length === 0) return '';
  return onRepository(session, run, (repo) => repo.patch(run.change, run.message));
}
