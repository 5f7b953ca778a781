/**
 * Run folders and manifests. Each run owns `<state>/runs/<run_id>/`:
 *   workspace/   the candidate repository the tools act on (the only thing a sandbox sees)
 *   control/     host-only: baseline copy and manifest, temporary files of writes, test reports
 * The control folder sits beside the workspace on the same file system, so the rename of a
 * temporary file into the workspace is atomic.
 */
import {
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  copyFileSync,
  chmodSync,
  existsSync,
} from 'node:fs';
import { join } from 'node:path';
import { asDiskFull, DiskFullError } from '../host/disk';
import { writeFileAtomic } from '../host/files';
import { manifest, manifestDigest, type ManifestEntry } from './manifest';
import type { PreparedWorkspace } from '../core/activities';

export interface RunPaths {
  root: string;
  workspace: string;
  control: string;
  baseline: string;
  tmp: string;
}

export function runPaths(stateDir: string, runId: string): RunPaths {
  if (!/^[A-Za-z0-9_.-]{1,128}$/.test(runId)) throw new Error(`invalid run id ${JSON.stringify(runId)}`);
  const root = join(stateDir, 'runs', runId);
  const control = join(root, 'control');
  return { root, workspace: join(root, 'workspace'), control, baseline: join(control, 'baseline'), tmp: join(control, 'tmp') };
}

export { manifest, manifestDigest, workspaceDigest, type ManifestEntry } from './manifest';

/** Copies a tree with new inodes; symlinks are copied as links, never followed. */
export function copyTree(from: string, to: string): void {
  mkdirSync(to, { recursive: true });
  for (const name of readdirSync(from).sort()) {
    const src = join(from, name);
    const dst = join(to, name);
    const stat = lstatSync(src);
    if (stat.isSymbolicLink()) symlinkSync(readlinkSync(src), dst);
    else if (stat.isDirectory()) copyTree(src, dst);
    else if (stat.isFile()) {
      copyFileSync(src, dst);
      chmodSync(dst, stat.mode & 0o777);
    }
    // A FIFO, socket or device node is never opened or recreated: a copy has no such entry, and
    // the manifest of the original still reports it.
  }
}

/**
 * Creates the run's fresh workspace from the fixture repository, with a baseline copy and
 * manifest in the control folder. Idempotent: `prepared.json` is written last, so a retry after
 * a crash halfway through starts over, and a retry after success returns the same answer.
 */
export function prepareWorkspace(paths: RunPaths, repoDir: string): PreparedWorkspace {
  const marker = join(paths.control, 'prepared.json');
  if (existsSync(marker)) return JSON.parse(readFileSync(marker, 'utf8')) as PreparedWorkspace;
  rmSync(paths.root, { recursive: true, force: true });
  copyTree(repoDir, paths.workspace);
  copyTree(repoDir, paths.baseline);
  const entries = manifest(paths.workspace);
  writeFileAtomic(join(paths.control, 'baseline-manifest.json'), JSON.stringify(entries), { tmpDir: paths.tmp });
  const prepared: PreparedWorkspace = {
    workspace_digest: manifestDigest(entries),
    files: entries.filter((e) => e.kind === 'file').length,
  };
  writeFileAtomic(marker, JSON.stringify(prepared), { tmpDir: paths.tmp });
  return prepared;
}

/**
 * Runs `make` (which makes the run's workspace and control folder). On a full disk the half-made
 * run folder is removed, giving its space back (the next attempt starts over), and a
 * DiskFullError names the workspace.
 */
export async function makingWorkspace<T>(paths: RunPaths, make: () => Promise<T>): Promise<T> {
  try {
    return await make();
  } catch (err) {
    const full = asDiskFull(err, 'workspace', "making the run's workspace and its baseline copy");
    if (full instanceof DiskFullError) rmSync(paths.root, { recursive: true, force: true });
    throw full;
  }
}

export function baselineManifest(paths: RunPaths): ManifestEntry[] {
  return JSON.parse(readFileSync(join(paths.control, 'baseline-manifest.json'), 'utf8')) as ManifestEntry[];
}
