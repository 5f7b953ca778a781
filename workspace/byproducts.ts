/**
 * Only receipted writes leave a run. A test or acceptance process runs with the workspace in
 * reach, and whatever it changes there (a source file rewritten, a file added, an executable bit,
 * a link, a FIFO, a folder turned into a link) is undone before the next step, so the verified
 * diff, `branch`, `patch` and `merge_task` hold exactly what went through the write path.
 *
 * How: the workspace's manifest before the process (stat-cached, so an unchanged workspace costs
 * one walk of lstats) is the state it goes back to. Before the process starts, the files of that
 * state that the baseline copy does not hold (the run's writes: a handful) are copied into the
 * control folder under their digest (`objects/<digest>`), and the state itself is written down as
 * its difference to the baseline manifest (`undo.json`). After the process, the manifest again:
 * every path whose entry differs is put back from the baseline copy or an object, and what was
 * added is removed. The setup phase's products are part of the baseline (sandbox/setup), so
 * they are never taken for a change.
 *
 * Hazards:
 * - Nothing is followed or written through. The topmost changed entry is removed (a link is
 *   unlinked, a folder removed without following the links inside it), then entries are made
 *   parents first; each file is a fresh copy renamed into place, never an existing inode opened
 *   or chmod-ed (a local test may have hard-linked a host file there). Each copy is checked
 *   against its digest before the rename.
 * - A worker killed while the process ran leaves `undo.json`: the next guarded process of the run
 *   (the retried attempt, the verifier's) puts the workspace back first and reports that too.
 * - Modes other than the executable bit are not compared: a tree records only that bit.
 * - No space left while keeping or undoing is a DiskFullError of the workspace; what was not put
 *   back is put back by the next guarded process, from `undo.json`.
 */
import {
  statSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  unlinkSync,
  lstatSync,
  readlinkSync,
  chmodSync,
} from 'node:fs';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { onDisk } from '../host/disk';
import { writeFileAtomic } from '../host/files';
import { copyRegular, digestRegular } from './hostile-read';
import { nonRetryable } from '../core/failures';
import { manifest, type ManifestEntry } from './manifest';
import { baselineManifest, type RunPaths } from './workspace';

/** What a process changed and was undone: the first paths (sorted) and how many there were. */
export interface Undone {
  paths: string[];
  count: number;
}

/** Paths an `Undone` lists; the count says how many more there were. */
export const UNDONE_PATHS_SHOWN = 20;

/** The state to go back to, as its difference to the baseline manifest. */
interface UndoRecord {
  schema_version: 1;
  /** Entries that the baseline does not have, or has otherwise. */
  changed: ManifestEntry[];
  /** Paths of the baseline that the state does not have. */
  absent: string[];
}

const undoFile = (paths: RunPaths) => join(paths.control, 'undo.json');
const objectsDir = (paths: RunPaths) => join(paths.control, 'objects');

function sameEntry(a: ManifestEntry | undefined, b: ManifestEntry | undefined): boolean {
  if (a === b) return true;
  if (a === undefined || b === undefined || a.kind !== b.kind || a.path !== b.path) return false;
  switch (a.kind) {
    case 'file':
      return a.digest === (b as typeof a).digest && a.executable === (b as typeof a).executable;
    case 'symlink':
      return a.target === (b as typeof a).target;
    case 'special':
      return a.type === (b as typeof a).type;
    case 'dir':
      return true;
  }
}

const depth = (path: string) => path.split('/').length;
const byDepth = (paths: string[]) => [...paths].sort((a, b) => depth(a) - depth(b) || (a < b ? -1 : a > b ? 1 : 0));

// With no space left, `undo.json` stays and the next guarded process (a retry) puts the workspace back first.
const full = <R>(what: string, fn: () => R) => onDisk('workspace', `${what} a test process's changes in the control folder`, fn);

/**
 * Before a process (in a workspace thread): what an earlier attempt left is put back, then the
 * state to go back to is written down. Returns the paths put back and the workspace's entries.
 */
export function guard(paths: RunPaths): { earlier: string[]; entries: number } {
  const earlier = full('undoing', () => settle(paths));
  const base = baselineByPath(paths);
  const before = manifest(paths.workspace);
  full('keeping what is needed to undo', () => keep(paths, before, base));
  return { earlier, entries: before.length };
}

/** After a process (in a workspace thread): the workspace made the written-down state again; the paths that differed. */
export function restore(paths: RunPaths): string[] {
  const known = seen.get(paths.workspace);
  const base = baselineByPath(paths);
  // This thread wrote down the state now on disk: its manifest is at hand (and an unchanged
  // workspace is that very array). Another thread may have written a later one since: then the
  // file, not this thread's memory, says what to go back to.
  if (known !== undefined && known.base === base && known.state !== null && writtenDown(paths) === known.record)
    return full('undoing', () => undo(paths, base, known.state));
  return full('undoing', () => settle(paths));
}

/** The state written down for the workspace, as its file's text (null: none). */
function writtenDown(paths: RunPaths): string | null {
  try {
    return readFileSync(undoFile(paths), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/**
 * Puts back what a guarded process of the run left when its worker died, before a step that does
 * not guard a process of its own looks at the workspace (the verifier); null when nothing was left.
 */
export function settleLeftovers(paths: RunPaths): Undone | null {
  return undoneOf(onDisk('workspace', "undoing a test process's changes in the control folder", () => settle(paths)));
}

/**
 * What was undone, told briefly: the first paths in order and how many (in the thread, so a
 * process that left 400,000 paths costs the worker's event loop no sort and no copy of them).
 */
export function undoneOf(...lists: string[][]): Undone | null {
  const all = [...new Set(lists.flat())].sort();
  return all.length === 0 ? null : { paths: all.slice(0, UNDONE_PATHS_SHOWN), count: all.length };
}

/**
 * Puts back a state an earlier attempt wrote down and did not get to restore (its worker died
 * while the process ran, or another thread kept it); returns the paths that were undone.
 */
function settle(paths: RunPaths): string[] {
  if (!existsSync(undoFile(paths))) return [];
  const record = JSON.parse(readFileSync(undoFile(paths), 'utf8')) as UndoRecord;
  const base = baselineByPath(paths);
  const want = new Map(base);
  for (const path of record.absent) want.delete(path);
  for (const e of record.changed) want.set(e.path, e);
  return undo(paths, base, null, want);
}

/**
 * Per workspace, the baseline manifest by path and the last state written down, so that an
 * unchanged workspace (the manifest cache returns the very same array) costs no parse and no
 * comparison. Bounded like the manifest cache; a restarted worker reads everything once.
 */
const seen = new Map<string, { stamp: string; base: Map<string, ManifestEntry>; state: ManifestEntry[] | null; record: string }>();
const SEEN_WORKSPACES = 32;

function baselineByPath(paths: RunPaths): Map<string, ManifestEntry> {
  const st = statSync(join(paths.control, 'baseline-manifest.json'));
  const stamp = `${st.ino}:${st.size}:${st.mtimeMs}:${st.ctimeMs}`;
  const known = seen.get(paths.workspace);
  if (known?.stamp === stamp) return known.base;
  const base = new Map(baselineManifest(paths).map((e) => [e.path, e]));
  seen.delete(paths.workspace);
  seen.set(paths.workspace, { stamp, base, state: null, record: '' });
  if (seen.size > SEEN_WORKSPACES) seen.delete(seen.keys().next().value!);
  return base;
}

/** Whether the baseline (the starting repository) has `path`; read through the same cache. */
export function baselineHas(paths: RunPaths, path: string): boolean {
  return baselineByPath(paths).has(path);
}

/** Writes down the state `before` (its files the baseline lacks, then its difference to the baseline). */
function keep(paths: RunPaths, before: ManifestEntry[], base: Map<string, ManifestEntry>): void {
  const known = seen.get(paths.workspace);
  if (known !== undefined && known.base === base && known.state === before) {
    // The same state as last time: its objects are kept, only the record is written again.
    writeFileAtomic(undoFile(paths), known.record, { tmpDir: paths.tmp });
    return;
  }
  const changed: ManifestEntry[] = [];
  let kept = 0;
  for (const e of before) {
    const b = base.get(e.path);
    if (b !== undefined) kept++;
    if (!sameEntry(b, e)) changed.push(e);
  }
  let absent: string[] = [];
  if (kept !== base.size) {
    const present = new Set(before.map((e) => e.path));
    absent = [...base.keys()].filter((p) => !present.has(p));
  }
  const objects = objectsDir(paths);
  const needed = new Set<string>();
  for (const e of changed) {
    if (e.kind !== 'file') continue;
    needed.add(e.digest);
    const object = join(objects, e.digest);
    if (existsSync(object)) continue;
    mkdirSync(objects, { recursive: true });
    copyChecked(join(paths.workspace, e.path), e.digest, e.path, paths, object);
  }
  // Objects of earlier states that this one no longer has.
  if (existsSync(objects)) for (const name of readdirSync(objects)) if (!needed.has(name)) rmSync(join(objects, name), { force: true });
  const record: UndoRecord = { schema_version: 1, changed, absent };
  const text = JSON.stringify(record);
  writeFileAtomic(undoFile(paths), text, { tmpDir: paths.tmp });
  if (known !== undefined && known.base === base) Object.assign(known, { state: before, record: text });
}

/** Copies `from` to `to` through a temporary file of the control folder, checked against `digest`. */
function copyChecked(from: string, digest: string, path: string, paths: RunPaths, to: string, executable?: boolean): void {
  mkdirSync(paths.tmp, { recursive: true });
  const tmp = join(paths.tmp, `undo-${randomUUID()}`);
  try {
    if (copyRegular(from, tmp, path) !== digest)
      throw nonRetryable('InfrastructureError', `the copy of ${path} kept to undo a test's changes differs from what was there`);
    if (executable !== undefined) chmodSync(tmp, executable ? 0o755 : 0o644);
    renameSync(tmp, to);
  } finally {
    rmSync(tmp, { force: true });
  }
}

/**
 * Makes the workspace the state `want` (by default `before`, the manifest taken before the
 * process), then forgets the written-down state. Returns the paths that differed.
 */
function undo(
  paths: RunPaths,
  base: Map<string, ManifestEntry>,
  before: ManifestEntry[] | null,
  want?: Map<string, ManifestEntry>,
): string[] {
  const now = manifest(paths.workspace);
  let changed: string[] = [];
  // An unchanged workspace gives the very manifest the cache returned before the process.
  if (now !== before) {
    want ??= new Map(before!.map((e) => [e.path, e]));
    const current = new Map(now.map((e) => [e.path, e]));
    changed = [...new Set([...want.keys(), ...current.keys()])].filter((p) => !sameEntry(want!.get(p), current.get(p))).sort();
    if (changed.length > 0) {
      putBack(paths, base, want, current, changed);
      // Only the changed paths were touched: each is checked again, not the whole tree.
      const left = changed.filter((p) => !isAsWanted(paths.workspace, p, want!.get(p)));
      if (left.length > 0)
        throw nonRetryable(
          'InfrastructureError',
          `the workspace could not be put back after a test process changed it: ${left.slice(0, UNDONE_PATHS_SHOWN).join(', ')}`,
        );
    }
  }
  rmSync(undoFile(paths), { force: true });
  return changed;
}

/** Whether `path` below `root` is now what `e` says (absent when `e` is undefined), looked at without following. */
function isAsWanted(root: string, path: string, e: ManifestEntry | undefined): boolean {
  const abs = join(root, path);
  const st = lstatSync(abs, { throwIfNoEntry: false });
  if (e === undefined || st === undefined) return e === undefined && st === undefined;
  if (e.kind === 'dir') return st.isDirectory();
  if (e.kind === 'symlink') return st.isSymbolicLink() && readlinkSync(abs) === e.target;
  if (e.kind === 'file') return st.isFile() && ((st.mode & 0o111) !== 0) === e.executable && digestRegular(abs, path) === e.digest;
  return false;
}

/** Throws unless every folder above `path` is a folder (never a link) below the root. */
function checkParents(root: string, path: string): void {
  const parts = path.split('/');
  let dir = root;
  for (const part of parts.slice(0, -1)) {
    dir = join(dir, part);
    if (!lstatSync(dir).isDirectory())
      throw nonRetryable('InfrastructureError', `cannot undo ${path}: ${dir.slice(root.length + 1)} is not a folder`);
  }
}

function putBack(
  paths: RunPaths,
  base: Map<string, ManifestEntry>,
  want: Map<string, ManifestEntry>,
  current: Map<string, ManifestEntry>,
  changed: string[],
): void {
  const root = paths.workspace;
  const removed = new Set<string>();
  const underRemoved = (path: string) => {
    for (let i = path.lastIndexOf('/'); i > 0; i = path.lastIndexOf('/', i - 1)) if (removed.has(path.slice(0, i))) return true;
    return false;
  };
  // What is there and should not be, topmost first: a folder goes with everything below it.
  for (const path of byDepth(changed)) {
    const there = current.get(path);
    if (there === undefined || underRemoved(path)) continue;
    if (there.kind === 'dir' && want.get(path)?.kind === 'dir') continue;
    checkParents(root, path);
    if (there.kind === 'dir') rmSync(join(root, path), { recursive: true, force: true });
    else unlinkSync(join(root, path));
    removed.add(path);
  }
  // What should be there, parents first.
  for (const path of byDepth(changed)) {
    const e = want.get(path);
    if (e === undefined || (e.kind === 'dir' && current.get(path)?.kind === 'dir')) continue;
    checkParents(root, path);
    const abs = join(root, path);
    if (e.kind === 'dir') mkdirSync(abs);
    else if (e.kind === 'symlink') symlinkSync(e.target, abs);
    else if (e.kind === 'file') {
      const b = base.get(path);
      const source = b?.kind === 'file' && b.digest === e.digest ? join(paths.baseline, path) : join(objectsDir(paths), e.digest);
      copyChecked(source, e.digest, path, paths, abs, e.executable);
    } else throw nonRetryable('InfrastructureError', `cannot undo ${path}: a ${e.type} file that was there cannot be made again`);
  }
}
