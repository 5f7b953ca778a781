/**
 * A completed repository run's verified change, back in the user's repository (SPEC section 10):
 * as a branch (one commit on the base commit, made on a temporary index, created by one
 * update-ref whose expected old value is the null id) or as a patch for `git apply` (made in a
 * temporary object folder, so the repository gets nothing). The working tree, the index, HEAD
 * and every other ref stay as they are; a refusal changes nothing.
 */
import { runInputSchema, type ParsedRunInput } from '../core/contracts';
import type { Decision } from '../core/contracts';
import { readVerifiedChange, VerifiedChangeError } from '../host/repository';
import { runPaths } from '../host/workspace/workspace';
import { GitError, GitRepository, type TreeChange } from '../host/git';
import type { Session } from './session';
import { openStore } from './stored-trace';
import type { RunOutcome } from '../core/run-view';

/** Why no branch or patch comes of a run: exit status 1, with this line. */
export class NoBranch extends Error {
  override name = 'NoBranch';
}

interface RunChange {
  repo: GitRepository;
  base: string;
  changes: TreeChange[];
  message: string;
}

/** The commit message: the run's final summary, then the trailers that name the run and the model. */
export function commitMessage(summary: string, workflowId: string, model: string): string {
  const text = summary.trim() === '' ? `Change made by coding-agent run ${workflowId}` : summary.trim();
  return `${text}\n\nAgent-Run: ${workflowId}\nAgent-Model: ${model}\n`;
}

/** The final summary of a run, from this machine's host store (the `final` decision, whole). */
function finalSummary(session: Session, outcome: RunOutcome, workflowId: string): string {
  const store = openStore(session.settings.stateDir);
  if (store === null)
    throw new NoBranch(`no host store in ${session.settings.stateDir}: run this on the worker host that ran ${workflowId}`);
  try {
    const finals = store
      .transcript(outcome.transcript)
      .filter((e): e is { decision: string } => 'decision' in e)
      .map((e) => store.get<Decision>(e.decision))
      .filter((d): d is Extract<Decision, { kind: 'final' }> => d.kind === 'final');
    return finals.at(-1)?.text ?? '';
  } finally {
    store.close();
  }
}

/**
 * The verified change of a completed repository run, or a NoBranch naming why there is none.
 * `anyEnd`: of a run that ended otherwise too, once verified (a batch's predictions file).
 */
async function runChange(session: Session, workflowId: string, anyEnd = false): Promise<RunChange> {
  const { runHandle, startInput, isRunning, runOutcome } = await import('./run-access');
  const handle = runHandle(session.client, workflowId);
  const raw = await startInput(handle);
  if (raw === null) throw new NoBranch(`no run ${workflowId}`);
  if (await isRunning(handle)) throw new NoBranch(`${workflowId} is still running: a branch comes from a completed run`);
  const outcome = await runOutcome(handle);
  const { status, reason } = outcome.record;
  if (status !== 'completed' && !anyEnd)
    throw new NoBranch(
      `${workflowId} ended ${status}${reason ? ` (${reason})` : ''}: only a completed run's verified change becomes a branch`,
    );
  const parsed = runInputSchema.safeParse(raw);
  const input: ParsedRunInput | null = parsed.success ? parsed.data : null;
  if (!input?.repo) throw new NoBranch(`${workflowId} is not a repository run: its change has no repository to go back to`);
  let kept;
  try {
    kept = readVerifiedChange(runPaths(session.settings.stateDir, outcome.state.run_id));
  } catch (err) {
    if (err instanceof VerifiedChangeError) throw new NoBranch(err.message);
    throw err;
  }
  if (kept.base_commit !== input.repo.base_commit)
    throw new NoBranch(`the kept change of ${workflowId} is on ${kept.base_commit}, not on the run's base ${input.repo.base_commit}`);
  const model = input.source.kind === 'provider' ? input.source.model : `replay:${outcome.record.replay ?? 'unknown'}`;
  let repo: GitRepository;
  try {
    repo = GitRepository.open(input.repo.path);
    repo.resolveCommit(kept.base_commit);
  } catch (err) {
    if (err instanceof GitError) throw new NoBranch(`${input.repo.path}: ${err.message}`);
    throw err;
  }
  return {
    repo,
    base: kept.base_commit,
    changes: kept.changes,
    message: commitMessage(finalSummary(session, outcome, workflowId), workflowId, model),
  };
}

/** Creates `name` (default `agent/<workflow-id>`) at one new commit on the run's base; refuses a name that exists. */
export async function branchFromRun(
  session: Session,
  workflowId: string,
  name?: string,
): Promise<{ branch: string; ref: string; commit: string; base: string; paths: string[] }> {
  const branch = name ?? `agent/${workflowId}`;
  const change = await runChange(session, workflowId);
  try {
    // Checked before any object is written: a name that cannot be created leaves the repository as it was.
    const ref = change.repo.branchRef(branch);
    if (change.repo.refExists(ref)) throw new GitError('ref_exists', `branch ${branch} exists already; choose another name with --name`);
    const { commit } = change.repo.commitChange(change.base, change.changes, change.message);
    change.repo.createBranch(branch, commit, `coding-agent: branch from run ${workflowId}`);
    return { branch, ref, commit, base: change.base, paths: change.changes.map((c) => c.path) };
  } catch (err) {
    if (err instanceof GitError && (err.kind === 'ref_exists' || err.kind === 'bad_ref_name')) {
      throw new NoBranch(err.kind === 'bad_ref_name' && name === undefined ? `${err.message}: give one with --name NAME` : err.message);
    }
    throw err;
  }
}

/** The run's verified change as a patch that `git apply` takes, with nothing written to the repository. */
export async function patchFromRun(session: Session, workflowId: string): Promise<string> {
  const change = await runChange(session, workflowId);
  return change.repo.patch(change.base, change.changes, change.message);
}

/**
 * The change a repository run's verifier saw, completed or not, as a patch (a batch's predictions
 * file); '' when the run was never verified (it ended before). A NoBranch says why there is none
 * where there should be one (its state folder is not on this machine, say).
 */
export async function verifiedPatch(session: Session, workflowId: string): Promise<string> {
  const { runHandle, runOutcome } = await import('./run-access');
  const outcome = await runOutcome(runHandle(session.client, workflowId));
  if (outcome.state.verification === null) return '';
  const change = await runChange(session, workflowId, true);
  return change.changes.length === 0 ? '' : change.repo.patch(change.base, change.changes, change.message);
}
