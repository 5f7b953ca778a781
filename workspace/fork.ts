/**
 * A fork's workspace: the forked run's baseline (with its manifest and a repository run's
 * acceptance files) copied into the new run's folders, then each receipted write of the plan put
 * back in order. Each write is checked before (the file must have the write's `before` digest) and
 * after (its bytes, from the host store, must have the `after` digest), and the whole workspace
 * must end with the digest the forked run recorded; otherwise nothing is left behind and the fork
 * ends `fork_unavailable`. Idempotent like every workspace preparation: `prepared.json` last.
 *
 * The plan's shape and the copy of it kept in the control folder (`fork.json`, a fork of this run
 * inherits its writes) are here; workspace/fork-plan.ts makes a plan from the host's store.
 */
import { copyFileSync, existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { PreparedWorkspace } from '../core/activities';
import { nonRetryable } from '../core/failures';
import { sha256 } from '../host/digest';
import { writeFileAtomic } from '../host/files';
import { resolveInWorkspace } from './fs-safety';
import { digestHostile } from './hostile-read';
import { copyTree, manifest, manifestDigest, type RunPaths } from './workspace';

/** One receipted write a fork puts back, in order. */
export interface ForkWrite {
  action_id: string;
  path: string;
  before: string;
  after: string;
}

/** What a new run restores of another run's state after one of its turns (planned by workspace/fork-plan.ts). */
export interface ForkPlan {
  schema_version: 1;
  /** The forked run's run id: its run folder holds the baseline. */
  from_run: string;
  turn: number;
  writes: ForkWrite[];
  /** The workspace's digest the forked run recorded after the turn. */
  workspace_digest: string;
  /** The transcript head after the turn. */
  transcript: string | null;
  /** The replay's cursor after the turn. */
  cursor: number;
}

/** Where a fork keeps the plan it was restored from (a fork of it inherits its writes). */
const forkFile = (paths: RunPaths) => join(paths.control, 'fork.json');

/** The plan a run that is itself a fork was restored from, or null for a run that is not one. */
export function keptForkPlan(paths: RunPaths): ForkPlan | null {
  return existsSync(forkFile(paths)) ? (JSON.parse(readFileSync(forkFile(paths), 'utf8')) as ForkPlan) : null;
}

const unavailable = (detail: string) => nonRetryable('ForkUnavailable', detail);

export function prepareForkWorkspace(
  paths: RunPaths,
  from: RunPaths,
  plan: ForkPlan,
  content: (digest: string) => Buffer | null,
): PreparedWorkspace {
  const marker = join(paths.control, 'prepared.json');
  if (existsSync(marker)) return JSON.parse(readFileSync(marker, 'utf8')) as PreparedWorkspace;
  rmSync(paths.root, { recursive: true, force: true });
  try {
    copyTree(from.baseline, paths.workspace);
    copyTree(from.baseline, paths.baseline);
    copyFileSync(join(from.control, 'baseline-manifest.json'), join(paths.control, 'baseline-manifest.json'));
    if (existsSync(join(from.control, 'acceptance'))) copyTree(join(from.control, 'acceptance'), join(paths.control, 'acceptance'));
    for (const write of plan.writes) putBack(paths, write, content);
    const entries = manifest(paths.workspace);
    const digest = manifestDigest(entries);
    if (digest !== plan.workspace_digest)
      throw unavailable(
        `the workspace restored after turn ${plan.turn} has the digest ${digest}, not ${plan.workspace_digest} as the forked run recorded: its baseline or a write is not as it was`,
      );
    writeFileAtomic(forkFile(paths), JSON.stringify(plan), { tmpDir: paths.tmp });
    const prepared: PreparedWorkspace = { workspace_digest: digest, files: entries.filter((e) => e.kind === 'file').length };
    writeFileAtomic(marker, JSON.stringify(prepared), { tmpDir: paths.tmp });
    return prepared;
  } catch (err) {
    rmSync(paths.root, { recursive: true, force: true });
    throw err;
  }
}

/** One write put back: the file as it was before (or absent), then its bytes as they were after, its mode kept. */
function putBack(paths: RunPaths, w: ForkWrite, content: (digest: string) => Buffer | null): void {
  const resolved = resolveInWorkspace(paths.workspace, w.path);
  if (!resolved.ok) throw unavailable(`${w.path} cannot be written again: ${resolved.reason}`);
  const read = resolved.stat === null ? null : digestHostile(resolved.abs, w.path);
  const current = read === null ? 'absent' : read.ok ? read.digest : read.detail;
  if (current !== w.before) throw unavailable(`${w.path} is not as action ${w.action_id} found it (${current}, not ${w.before})`);
  const bytes = content(w.after);
  if (bytes === null) throw unavailable(`the host store no longer holds the content written to ${w.path} (${w.after})`);
  if (sha256(bytes) !== w.after) throw unavailable(`the content kept for ${w.path} does not have its digest ${w.after}`);
  writeFileAtomic(resolved.abs, bytes, { tmpDir: paths.tmp, mode: resolved.stat ? resolved.stat.mode & 0o777 : 0o644 });
}
