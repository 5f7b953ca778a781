/**
 * Writing a tree read from a repository into a run's workspace (in a workspace thread): the
 * import's plan made from the tree's listing (`planImport`), files in batches as their bytes
 * arrive (`writePlanned`), links last, then the baseline copy and its manifest. The event loop
 * only streams blobs from git to here: it holds the plan's id and its `cat-file` input, never an
 * entry of the tree.
 *
 * Hazards: a tree's paths come from whoever made the commit; the plan refuses one with an empty,
 * `.`, `..` or `.git` segment (workspace/listing.ts). Files are created with O_EXCL below folders
 * this code made and never through a link: a path whose parent is anything but a folder is an
 * error, and links are made only after every file, so no write can follow one. A batch's blobs
 * must be the plan's, in its order.
 */
import { randomUUID } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  existsSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import type { PreparedWorkspace } from '../core/activities';
import { writeFileAtomic } from '../host/files';
import { entryKind, GitError, type RepositoryLimits } from './git';
import { eachEntry, unsafeRefusal, unsafeTreePath } from './listing';
import { copyTree, manifest, manifestDigest, type RunPaths } from './workspace';

/** One blob of an import and the paths its bytes go to (a file's mode; a link's is 0). */
interface PlannedBlob {
  oid: string;
  to: { path: string; mode: number }[];
}

/** What is written below one root: the workspace, or the acceptance folder (its paths renamed below it). */
interface PlannedRoot {
  root: string;
  files: PlannedBlob[];
  links: PlannedBlob[];
}

interface ImportPlan {
  id: string;
  roots: PlannedRoot[];
}

/** The blobs one kind of a root reads: `cat-file --batch` input (an id a line) and how many. */
export interface BlobReads {
  input: Uint8Array;
  count: number;
}

/** What the event loop gets of a plan: its id and file, and what each root reads. */
export interface PlanReads {
  id: string;
  file: string;
  roots: { root: string; files: BlobReads; links: BlobReads }[];
}

/** Where a batch goes: which plan, root and kind, from which of its blobs. */
export interface PlannedAt {
  file: string;
  id: string;
  root: number;
  kind: 'files' | 'links';
  from: number;
}

/** Blobs read in order: their ids, and their bytes one after the other. */
export interface BlobBatch {
  oids: string[];
  lengths: number[];
  data: Uint8Array;
}

/** The plans this thread made or read last, by id (any thread reads one from its file). */
const plans = new Map<string, ImportPlan>();
const PLANS_KEPT = 2;

function keep(plan: ImportPlan): ImportPlan {
  plans.delete(plan.id);
  plans.set(plan.id, plan);
  if (plans.size > PLANS_KEPT) plans.delete(plans.keys().next().value!);
  return plan;
}

const planFile = (paths: RunPaths) => join(paths.control, 'import-plan.json');

/**
 * The import of the tree `listing` lists into `paths`: its regular files and links, each blob
 * once with every path it goes to, below the workspace and (for `acceptanceDir`) the acceptance
 * folder in the control folder; submodules are left out. Kept in `import-plan.json` until
 * `finishTree`. A limit or an unsafe path is a GitError.
 */
export function planImport(paths: RunPaths, listing: Uint8Array, limits: RepositoryLimits, acceptanceDir: string | null): PlanReads {
  const below = (p: string) => acceptanceDir !== null && p.startsWith(`${acceptanceDir}/`);
  const roots = [{ root: paths.workspace, files: new Map<string, PlannedBlob>(), links: new Map<string, PlannedBlob>() }];
  if (acceptanceDir !== null) roots.push({ root: join(paths.control, 'acceptance'), files: new Map(), links: new Map() });
  eachEntry(listing, limits, (e) => {
    const why = unsafeTreePath(e.path);
    if (why !== null) throw new GitError('failed', unsafeRefusal(e.path, why));
    const what = entryKind(e);
    if (what === null) return;
    const kind = what === 'file' ? 'files' : 'links';
    const [at, path] = below(e.path) ? [roots[1], e.path.slice(acceptanceDir!.length + 1)] : [roots[0], e.path];
    const blobs = at[kind];
    const blob = blobs.get(e.oid) ?? { oid: e.oid, to: [] };
    blobs.set(e.oid, blob);
    blob.to.push({ path, mode: kind === 'links' ? 0 : e.mode === '100755' ? 0o755 : 0o644 });
  });
  const plan = keep({
    id: randomUUID(),
    roots: roots.map((r) => ({ root: r.root, files: [...r.files.values()], links: [...r.links.values()] })),
  });
  mkdirSync(paths.control, { recursive: true });
  writeFileSync(planFile(paths), JSON.stringify(plan));
  const reads = (blobs: PlannedBlob[]): BlobReads => ({ input: Buffer.from(blobs.map((b) => `${b.oid}\n`).join('')), count: blobs.length });
  return {
    id: plan.id,
    file: planFile(paths),
    roots: plan.roots.map((r) => ({ root: r.root, files: reads(r.files), links: reads(r.links) })),
  };
}

function planOf(file: string, id: string): ImportPlan {
  const known = plans.get(id);
  if (known) return known;
  const read = JSON.parse(readFileSync(file, 'utf8')) as ImportPlan;
  if (read.id !== id) throw new Error(`${file} holds another import's plan (${read.id}, not ${id})`);
  return keep(read);
}

/** Writes `batch` where `at` says: each blob's bytes to every path the plan gives it, files or links. */
export function writePlanned(at: PlannedAt, batch: BlobBatch): void {
  const root = planOf(at.file, at.id).roots[at.root];
  const blobs = root[at.kind];
  let offset = 0;
  mkdirSync(root.root, { recursive: true });
  batch.oids.forEach((oid, k) => {
    const blob = blobs[at.from + k];
    if (blob?.oid !== oid) throw new Error(`the import read ${oid} where its plan has ${blob?.oid ?? 'nothing'}`);
    const bytes = batch.data.subarray(offset, offset + batch.lengths[k]);
    offset += batch.lengths[k];
    for (const to of blob.to) {
      if (at.kind === 'files') createFile(root.root, to.path, bytes, to.mode);
      else writeLink(root.root, to.path, Buffer.from(bytes).toString('utf8'));
    }
  });
}

/** Creates `rel` below `root` with O_EXCL, making its folders; never through an existing link. */
export function createFile(root: string, rel: string, bytes: Uint8Array, mode: number): void {
  const parts = rel.split('/');
  let dir = root;
  for (const part of parts.slice(0, -1)) {
    dir = join(dir, part);
    let st;
    try {
      st = lstatSync(dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      mkdirSync(dir);
      continue;
    }
    if (!st.isDirectory()) throw new Error(`${rel}: a parent is not a folder in the tree`);
  }
  const file = join(root, rel);
  const fd = openSync(file, 'wx', mode);
  try {
    for (let off = 0; off < bytes.length;) off += writeSync(fd, bytes, off, bytes.length - off);
  } finally {
    closeSync(fd);
  }
  chmodSync(file, mode); // not the umask's
}

/** A fresh, empty run folder (what an earlier attempt left is removed first). */
export function beginTree(paths: RunPaths): void {
  rmSync(paths.root, { recursive: true, force: true });
  mkdirSync(paths.workspace, { recursive: true });
}

/** A link at `rel` below `root` whose target is `target` as committed (never followed). */
function writeLink(root: string, rel: string, target: string): void {
  const path = join(root, rel);
  mkdirSync(dirname(path), { recursive: true });
  if (lstatSync(dirname(path)).isSymbolicLink()) throw new Error(`${rel}: a parent is a link`);
  symlinkSync(target, path);
}

/** The workspace's manifest as the baseline's (after the baseline copy is made); returns its digest. */
export function writeBaselineManifest(paths: RunPaths): string {
  const entries = manifest(paths.workspace);
  writeFileAtomic(join(paths.control, 'baseline-manifest.json'), JSON.stringify(entries), { tmpDir: paths.tmp });
  return manifestDigest(entries);
}

/** The baseline copy and manifest, then `prepared.json` last (what makes the preparation idempotent); the import's plan goes. */
export function finishTree(paths: RunPaths): PreparedWorkspace {
  if (!existsSync(paths.workspace)) mkdirSync(paths.workspace, { recursive: true });
  rmSync(planFile(paths), { force: true });
  copyTree(paths.workspace, paths.baseline);
  const digest = writeBaselineManifest(paths);
  const prepared: PreparedWorkspace = {
    workspace_digest: digest,
    files: manifest(paths.workspace).filter((e) => e.kind === 'file').length,
  };
  writeFileAtomic(join(paths.control, 'prepared.json'), JSON.stringify(prepared), { tmpDir: paths.tmp });
  return prepared;
}
