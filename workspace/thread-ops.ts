/**
 * The operations a workspace thread runs (thread.ts), by name: the synchronous walks, copies and
 * writes of this folder. Nothing here may import thread.ts: a thread never calls another.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { prepareForkWorkspace, type ForkPlan } from './fork';
import { baselineHas, guard, restore, settleLeftovers, undoneOf } from './byproducts';
import { fileDiff, filesDiff, workspaceDiff, type DiffSide } from './diff';
import { mergePlan, snapshotFiles } from './merge';
import { searchWorkspace } from './search';
import type { MergeEntry } from '../core/activities';
import { lendTree, giveBackTree, type Owners } from './lend';
import { changedEntries, changedPaths, manifest, type ManifestEntry, manifestDigest, workspaceDigest, workspaceState } from './manifest';
import { copyForTests, prepareCopy, type ConfigChange } from './verification-tree';
import { beginTree, finishTree, planImport, writeBaselineManifest, writePlanned, type BlobBatch, type PlannedAt } from './tree-write';
import { keepVerifiedChange, type KeptChange } from './verified-change';
import { readListing, type ListingQuery } from './listing';
import type { RepositoryLimits } from './git';
import { baselineManifest, copyTree, prepareWorkspace, type RunPaths } from './workspace';

export const OPS = {
  digest: (dir: string) => workspaceDigest(dir),
  state: (dir: string) => workspaceState(dir),
  baselineManifest: (paths: RunPaths) => baselineManifest(paths),
  baselineDigest: (paths: RunPaths) => manifestDigest(baselineManifest(paths)),
  changedSinceBaseline: (paths: RunPaths) => changedEntries(baselineManifest(paths), manifest(paths.workspace)),
  /** The manifest of `dir` kept in `file`, for `changedSinceKept` after a process; its entries. */
  keepManifest: (dir: string, file: string) => {
    const entries = manifest(dir);
    writeFileSync(file, JSON.stringify(entries));
    return entries.length;
  },
  /** The paths changed in `dir` since `keepManifest`: the first `cap` in order, and how many. */
  changedSinceKept: (dir: string, file: string, cap: number) => {
    const changed = changedPaths(JSON.parse(readFileSync(file, 'utf8')) as ManifestEntry[], manifest(dir));
    return { paths: changed.slice(0, cap), count: changed.length };
  },
  settleLeftovers: (paths: RunPaths) => settleLeftovers(paths),
  copyForTests: (paths: RunPaths, from: string, label: string) => copyForTests(paths, from, label),
  prepareCopy: (tree: string, baseline: string, config: ConfigChange[], testPatch: string | null) =>
    prepareCopy(tree, baseline, config, testPatch),
  copyTree: (from: string, to: string) => copyTree(from, to),
  remove: (path: string) => rmSync(path, { recursive: true, force: true }),
  makeFolder: (path: string) => void mkdirSync(path, { recursive: true }),
  prepareFixture: (paths: RunPaths, repoDir: string) => prepareWorkspace(paths, repoDir),
  prepareFork: (paths: RunPaths, from: RunPaths, plan: ForkPlan, contents: Record<string, Uint8Array>) =>
    prepareForkWorkspace(paths, from, plan, (digest) => (contents[digest] ? Buffer.from(contents[digest]) : null)),
  inBaseline: (paths: RunPaths, path: string) => baselineHas(paths, path),
  search: (
    root: string,
    base: string,
    isFolder: boolean,
    query: string,
    caps: { maxResults: number; maxFileBytes: number; searchBytes: number },
  ) => searchWorkspace(root, base, isFolder, query, caps),
  fileDiff: (path: string, before: DiffSide, after: DiffSide) => fileDiff(path, before, after),
  workspaceDiff: (paths: RunPaths, capBytes: number, fileCap: number) => workspaceDiff(paths, capBytes, fileCap),
  filesDiff: (from: string, to: string, files: { path: string; absent: boolean; executable: boolean }[], fileCap: number) =>
    filesDiff(from, to, files, fileCap),
  mergePlan: (child: RunPaths, parent: RunPaths) => mergePlan(child, parent),
  snapshotFiles: (childWorkspace: string, snapshot: string, entries: MergeEntry[], taskId: string) =>
    snapshotFiles(childWorkspace, snapshot, entries, taskId),
  guard: (paths: RunPaths) => guard(paths),
  /** Restores, and tells what was undone with `earlier` (what `guard` settled first). */
  restore: (paths: RunPaths, earlier: string[]) => undoneOf(earlier, restore(paths)),
  readListing: (listing: Uint8Array, limits: RepositoryLimits, query: ListingQuery) => readListing(listing, limits, query),
  beginTree: (paths: RunPaths) => beginTree(paths),
  planImport: (paths: RunPaths, listing: Uint8Array, limits: RepositoryLimits, acceptanceDir: string | null) =>
    planImport(paths, listing, limits, acceptanceDir),
  writePlanned: (at: PlannedAt, batch: BlobBatch) => writePlanned(at, batch),
  finishTree: (paths: RunPaths) => finishTree(paths),
  writeBaselineManifest: (paths: RunPaths) => writeBaselineManifest(paths),
  keepChange: (paths: RunPaths, change: KeptChange) => keepVerifiedChange(paths, change),
  lendTree: (root: string, uid: number, gid: number) => lendTree(root, uid, gid),
  giveBackTree: (root: string, owners: Owners) => giveBackTree(root, owners),
};
