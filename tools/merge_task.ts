/**
 * merge_task in two halves, like apply_patch. `prepareMerge` compares a task's workspace with its
 * baseline (the parent's workspace when the task was dispatched) and the parent's workspace now:
 * a path the parent changed underneath is a conflict. Otherwise it snapshots the task's files into
 * the parent's control folder and returns one action over all paths, to be approved. `writeMerge`
 * performs it exactly once, keyed by action_id, with the three-state recovery of SPEC 4 applied to
 * every path: each one is at its `before` or its `after`, or the run stops `recovery_uncertain`.
 */
import { chmodSync, closeSync, fsyncSync, lstatSync, mkdirSync, openSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createTwoFilesPatch } from 'diff';
import type { PreparedAction } from '../core/contracts';
import { asDiskFull, onDisk } from '../host/disk';
import { workspaceState } from '../host/workspace/manifest';
import { Replacement } from '../host/workspace/replace';
import { copyRegular, readHostile } from '../host/workspace/hostile-read';
import { digestJson, sha256 } from '../host/digest';
import { faultPoint } from '../host/faults';
import { resolveInWorkspace } from '../host/workspace/fs-safety';
import { currentDigest as patchDigest, notWritten, overWorkspaceLimit } from './apply_patch';
import { baselineManifest, manifest, manifestDigest, runPaths, type ManifestEntry, type RunPaths } from '../host/workspace/workspace';
import { cutDiff, decodeText, type ToolContext } from './context';
import type { MergeEntry, MergeOutcome, MergePrepared } from '../core/activities';

const fileDigests = (entries: ManifestEntry[]) => new Map(entries.filter((e) => e.kind === 'file').map((e) => [e.path, e]));
const digestOf = (e: ManifestEntry | undefined) => (e === undefined ? 'absent' : e.kind === 'file' ? e.digest : `${e.kind}`);

export function prepareMerge(
  ctx: Omit<ToolContext, 'backend'>,
  stateDir: string,
  task: { task_id: string; run_id: string },
): MergePrepared {
  const child = runPaths(stateDir, task.run_id);
  const base = new Map(baselineManifest(child).map((e) => [e.path, e]));
  const now = new Map(manifest(child.workspace).map((e) => [e.path, e]));
  const parent = new Map(manifest(ctx.paths.workspace).map((e) => [e.path, e]));
  const changed = [...new Set([...base.keys(), ...now.keys()])].filter((p) => {
    const a = base.get(p);
    const b = now.get(p);
    if (a?.kind === 'dir' && b?.kind === 'dir') return false;
    return JSON.stringify(a) !== JSON.stringify(b);
  });
  changed.sort();
  if (changed.length === 0) return { kind: 'empty' };
  const unsupported = changed.filter((p) => now.get(p)?.kind !== 'file' || (base.has(p) && base.get(p)!.kind !== 'file'));
  if (unsupported.length > 0)
    return {
      kind: 'unsupported',
      paths: unsupported,
      reason: 'a merge carries files the task created or changed; it deleted or replaced these by something else',
    };
  const conflicts = changed.filter((p) => digestOf(parent.get(p)) !== digestOf(base.get(p)));
  if (conflicts.length > 0) return { kind: 'conflict', paths: conflicts };

  const childFiles = fileDigests([...now.values()]);
  const entries: MergeEntry[] = changed.map((path) => {
    const e = childFiles.get(path) as Extract<ManifestEntry, { kind: 'file' }>;
    return { path, before: digestOf(parent.get(path)), after: e.digest, executable: e.executable };
  });
  const sizeOf = (root: string, path: string) => lstatSync(join(root, path), { throwIfNoEntry: false })?.size ?? 0;
  const growth = entries.reduce((n, e) => n + sizeOf(child.workspace, e.path) - sizeOf(ctx.paths.workspace, e.path), 0);
  const over = overWorkspaceLimit(ctx.limits, workspaceState(ctx.paths.workspace).bytes, growth);
  if (over) return { kind: 'too_large', ...over };
  const actionId = digestJson({ run_id: ctx.runId, name: 'merge_task', task_id: task.task_id, entries });
  // The task's files as they are now: the write uses this snapshot, whatever the task does next.
  const snapshot = join(ctx.paths.control, 'merges', actionId);
  onDisk('workspace', `the snapshot of task ${task.task_id}'s files in the control folder`, () => {
    for (const entry of entries) {
      const dst = join(snapshot, entry.path);
      mkdirSync(dirname(dst), { recursive: true });
      rmSync(dst, { force: true });
      // Read as the task's processes may have left it: never through a link or from a FIFO.
      if (copyRegular(join(child.workspace, entry.path), dst, entry.path) !== entry.after)
        throw new Error(`${entry.path} of the task changed while its merge was prepared`);
    }
  });
  const parts = entries.map((entry) => {
    const read = (dir: string) => {
      const r = readHostile(join(dir, entry.path), ctx.limits.maxFileBytes, entry.path);
      return r.ok ? r.bytes : Buffer.from(r.kind === 'missing' ? '' : `${r.detail}, not shown\n`);
    };
    const before = entry.before === 'absent' ? '' : (decodeText(read(ctx.paths.workspace)) ?? '(binary)\n');
    const after = decodeText(read(snapshot)) ?? '(binary)\n';
    return createTwoFilesPatch(
      entry.before === 'absent' ? '/dev/null' : `a/${entry.path}`,
      `b/${entry.path}`,
      before,
      after,
      undefined,
      undefined,
      { context: 3 },
    );
  });
  const shown = cutDiff(parts.join(''), ctx.limits);
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
      workspace_digest: manifestDigest([...parent.values()]),
      diff: shown.diff,
      diff_truncated: shown.diff_truncated,
    },
  };
}

function currentDigest(paths: RunPaths, path: string): string {
  return patchDigest(join(paths.workspace, path), path);
}

/** Performs an approved merge. Safe to call any number of times for the same action. */
export function writeMerge(ctx: Omit<ToolContext, 'backend'>, action: PreparedAction, entries: MergeEntry[]): MergeOutcome {
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
    const now = manifestDigest(manifest(ctx.paths.workspace));
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
  action: PreparedAction,
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
