/**
 * merge_task in two halves, like apply_patch. `prepareMerge` compares a task's workspace with its
 * baseline (the parent's workspace when the task was dispatched) and the parent's workspace now:
 * a path the parent changed underneath is a conflict. Otherwise it snapshots the task's files into
 * the parent's control folder and returns one action over all paths, to be approved. `writeMerge`
 * performs it exactly once, keyed by action_id, with the three-state recovery of SPEC 4 applied to
 * every path: each one is at its `before` or its `after`, or the run stops `recovery_uncertain`.
 */
import { chmodSync, closeSync, fsyncSync, mkdirSync, openSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { PendingAction } from '../core/contracts';
import { asDiskFull } from '../host/disk';
import { Replacement } from '../workspace/replace';
import { copyRegular } from '../workspace/hostile-read';
import { digestJson, sha256 } from '../host/digest';
import { faultPoint } from '../host/faults';
import { resolveInWorkspace } from '../workspace/fs-safety';
import { offThread } from '../workspace/thread';
import { currentDigest as patchDigest, notWritten, overWorkspaceLimit } from './apply_patch';
import { runPaths, type RunPaths } from '../workspace/workspace';
import { cutDiff, type ToolContext } from './context';
import type { MergeEntry, MergeOutcome, MergePrepared } from '../core/activities';

export async function prepareMerge(
  ctx: Omit<ToolContext, 'backend'>,
  stateDir: string,
  task: { task_id: string; run_id: string },
): Promise<MergePrepared> {
  const child = runPaths(stateDir, task.run_id);
  const call = { key: ctx.paths.workspace };
  const plan = await offThread('mergePlan', [child, ctx.paths], call);
  if (plan.kind === 'empty' || plan.kind === 'conflict') return plan;
  if (plan.kind === 'unsupported')
    return { ...plan, reason: 'a merge carries files the task created or changed; it deleted or replaced these by something else' };
  const { entries } = plan;
  const over = overWorkspaceLimit(ctx.limits, plan.bytes, plan.growth);
  if (over) return { kind: 'too_large', ...over };
  const actionId = digestJson({ run_id: ctx.runId, name: 'merge_task', task_id: task.task_id, entries });
  const snapshot = join(ctx.paths.control, 'merges', actionId);
  await offThread('snapshotFiles', [child.workspace, snapshot, entries, task.task_id], call);
  const diff = await offThread(
    'filesDiff',
    [
      ctx.paths.workspace,
      snapshot,
      entries.map((e) => ({ path: e.path, absent: e.before === 'absent', executable: e.executable })),
      ctx.limits.maxFileBytes,
    ],
    call,
  );
  const shown = cutDiff(diff, ctx.limits);
  return {
    kind: 'prepared',
    entries,
    whole_diff: shown.whole,
    action: {
      action_id: actionId,
      path: entries[0].path,
      paths: entries.map((e) => e.path),
      before: digestJson(entries.map((e) => [e.path, e.before])),
      after: digestJson(entries.map((e) => [e.path, e.after])),
      args_digest: digestJson({ task_id: task.task_id }),
      workspace_digest: plan.workspace_digest,
      diff: shown.diff,
      diff_truncated: shown.diff_truncated,
    },
  };
}

function currentDigest(paths: RunPaths, path: string): string {
  return patchDigest(join(paths.workspace, path), path);
}

/** Performs an approved merge. Safe to call any number of times for the same action. */
export async function writeMerge(ctx: Omit<ToolContext, 'backend'>, action: PendingAction, entries: MergeEntry[]): Promise<MergeOutcome> {
  const receipt = ctx.ledger.receipt(action.action_id);
  if (receipt) return { kind: 'already_recorded', recovered: receipt.recovered };
  // An earlier attempt's kept links to old files would count as second hard links.
  const replacement = new Replacement(ctx.paths.tmp, action.action_id);
  replacement.clear();
  const states = entries.map((e) => ({ e, current: currentDigest(ctx.paths, e.path) }));
  if (ctx.ledger.hasIntent(action.action_id)) {
    // Recovery: a previous attempt may have written some paths. Each must be in a known state.
    const unknown = states.find((s) => s.current !== s.e.before && s.current !== s.e.after);
    if (unknown) return { kind: 'recovery_uncertain', path: unknown.e.path, current: unknown.current };
    if (states.every((s) => s.current === s.e.after)) {
      ctx.ledger.recordReceipt({ ...action, run_id: ctx.runId, recovered: true });
      return { kind: 'written', recovered: true };
    }
  } else {
    const now = await offThread('digest', [ctx.paths.workspace], { key: ctx.paths.workspace });
    if (now !== action.workspace_digest) return { kind: 'approval_stale', workspace_digest: now };
    ctx.ledger.recordIntent(ctx.runId, action);
  }
  try {
    const stopped = mergeFiles(ctx, replacement, action, states);
    if (stopped !== null) return stopped;
    ctx.ledger.recordReceipt({ ...action, run_id: ctx.runId, recovered: false });
  } catch (err) {
    throw notWritten(ctx, replacement, action, asDiskFull(err, 'workspace', `merging into ${action.path} through the control folder`));
  }
  replacement.commit();
  return { kind: 'written', recovered: false };
}

/** Puts each path not yet at its `after` in place from the merge's snapshot; an outcome when one cannot be. */
function mergeFiles(
  ctx: Omit<ToolContext, 'backend'>,
  replacement: Replacement,
  action: PendingAction,
  states: { e: MergeEntry; current: string }[],
): MergeOutcome | null {
  const snapshot = join(ctx.paths.control, 'merges', action.action_id);
  for (const { e, current } of states) {
    if (current === e.after) continue;
    const src = join(snapshot, e.path);
    if (patchDigest(src, e.path) !== e.after) return { kind: 'recovery_uncertain', path: e.path, current: 'snapshot changed' };
    const resolved = resolveInWorkspace(ctx.paths.workspace, e.path);
    if (!resolved.ok) return { kind: 'recovery_uncertain', path: e.path, current: resolved.reason };
    mkdirSync(dirname(resolved.abs), { recursive: true });
    const key = sha256(e.path).slice(0, 12);
    const tmp = replacement.temporary(key);
    rmSync(tmp, { force: true });
    copyRegular(src, tmp, e.path);
    chmodSync(tmp, e.executable ? 0o755 : 0o644);
    const fd = openSync(tmp, 'r+');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    replacement.put(tmp, resolved.abs, current !== 'absent', key);
    faultPoint('after_rename');
  }
  return null;
}
