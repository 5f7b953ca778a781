/**
 * The comparisons and copies behind merge_task (tools/merge_task.ts), in a workspace thread: a
 * task's workspace against its baseline and its parent's workspace now, and the snapshot of the
 * task's files its write takes them from.
 */
import { lstatSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { MergeEntry } from '../core/activities';
import { onDisk } from '../host/disk';
import { copyRegular } from './hostile-read';
import { manifest, manifestDigest, workspaceState, type ManifestEntry } from './manifest';
import { baselineManifest, type RunPaths } from './workspace';

const digestOf = (e: ManifestEntry | undefined) => (e === undefined ? 'absent' : e.kind === 'file' ? e.digest : `${e.kind}`);

export type MergePlan =
  | { kind: 'empty' }
  | { kind: 'unsupported'; paths: string[] }
  | { kind: 'conflict'; paths: string[] }
  | {
      kind: 'entries';
      entries: MergeEntry[];
      /** What the entries add to the parent's workspace, and what it holds now. */
      growth: number;
      bytes: number;
      /** The parent's workspace digest the merge is approved against. */
      workspace_digest: string;
    };

/** What merging the task's workspace (`child`) into its parent's would change, or why it cannot. */
export function mergePlan(child: RunPaths, parent: RunPaths): MergePlan {
  const base = new Map(baselineManifest(child).map((e) => [e.path, e]));
  const now = new Map(manifest(child.workspace).map((e) => [e.path, e]));
  const parentEntries = manifest(parent.workspace);
  const parentNow = new Map(parentEntries.map((e) => [e.path, e]));
  const changed = [...new Set([...base.keys(), ...now.keys()])].filter((p) => {
    const a = base.get(p);
    const b = now.get(p);
    if (a?.kind === 'dir' && b?.kind === 'dir') return false;
    return JSON.stringify(a) !== JSON.stringify(b);
  });
  changed.sort();
  if (changed.length === 0) return { kind: 'empty' };
  const unsupported = changed.filter((p) => now.get(p)?.kind !== 'file' || (base.has(p) && base.get(p)!.kind !== 'file'));
  if (unsupported.length > 0) return { kind: 'unsupported', paths: unsupported };
  const conflicts = changed.filter((p) => digestOf(parentNow.get(p)) !== digestOf(base.get(p)));
  if (conflicts.length > 0) return { kind: 'conflict', paths: conflicts };
  const entries: MergeEntry[] = changed.map((path) => {
    const e = now.get(path) as Extract<ManifestEntry, { kind: 'file' }>;
    return { path, before: digestOf(parentNow.get(path)), after: e.digest, executable: e.executable };
  });
  const sizeOf = (root: string, path: string) => lstatSync(join(root, path), { throwIfNoEntry: false })?.size ?? 0;
  const growth = entries.reduce((n, e) => n + sizeOf(child.workspace, e.path) - sizeOf(parent.workspace, e.path), 0);
  return {
    kind: 'entries',
    entries,
    growth,
    bytes: workspaceState(parent.workspace).bytes,
    workspace_digest: manifestDigest(parentEntries),
  };
}

/** The task's files as they are now, copied to `snapshot`: the write uses these, whatever the task does next. */
export function snapshotFiles(childWorkspace: string, snapshot: string, entries: MergeEntry[], taskId: string): void {
  onDisk('workspace', `the snapshot of task ${taskId}'s files in the control folder`, () => {
    for (const entry of entries) {
      const dst = join(snapshot, entry.path);
      mkdirSync(dirname(dst), { recursive: true });
      rmSync(dst, { force: true });
      // Read as the task's processes may have left it: never through a link or from a FIFO.
      if (copyRegular(join(childWorkspace, entry.path), dst, entry.path) !== entry.after)
        throw new Error(`${entry.path} of the task changed while its merge was prepared`);
    }
  });
}
