/**
 * A repository run's verified change: what the verifier saw between the baseline and the
 * workspace. The verifier returns it; its activity keeps it in the control folder (`change.json`,
 * with the text of the `final` it judged, and a copy of each changed file), from which `branch`
 * and `patch` make their commit: their one source.
 */
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { sha256 } from '../host/digest';
import { writeFileAtomic } from '../host/files';
import { copyRegular } from './hostile-read';
import type { ManifestEntry } from './manifest';
import type { RunPaths } from './workspace';

/** One changed path of the verified state, as a tree would hold it: a file by the digest of its bytes. */
export type ChangeEntry =
  | { path: string; kind: 'file'; executable: boolean; digest: string }
  | { path: string; kind: 'symlink'; target: string }
  | { path: string; kind: 'deleted' };

/** A change entry as git writes it into a tree: a file with its bytes too (read back, checked against its digest). */
export type ChangeEntryWithBytes = Exclude<ChangeEntry, { kind: 'file' }> | (Extract<ChangeEntry, { kind: 'file' }> & { bytes: Buffer });

/**
 * The verified change: the base commit and what the verifier saw changed on it. The verifier
 * returns it with digests; `readVerifiedChange` gives it back with each file's bytes.
 */
export interface VerifiedChange<Entry extends ChangeEntry = ChangeEntry> {
  base_commit: string;
  changes: Entry[];
}

/** The verified change as kept: with the run's final text, which `branch` makes its commit message of ('' when none). */
export interface KeptChange<Entry extends ChangeEntry = ChangeEntry> extends VerifiedChange<Entry> {
  summary: string;
}

/** `change.json` (a change kept by a build before `summary` has none). */
interface ChangeFile extends VerifiedChange {
  schema_version: 1;
  summary?: string;
}

const changeFolder = (paths: RunPaths) => join(paths.control, 'verified');

/**
 * The change between the baseline and the workspace, as git would record it: files with their
 * executable bit, symlinks, deletions (folders are not entries of a tree). Paths that are special
 * files (a FIFO, a socket) cannot be in a tree; they are returned apart.
 */
export function changeEntries(base: ManifestEntry[], current: ManifestEntry[]): { changes: ChangeEntry[]; unrepresentable: string[] } {
  const b = new Map(base.map((e) => [e.path, e]));
  const c = new Map(current.map((e) => [e.path, e]));
  const changes: ChangeEntry[] = [];
  const unrepresentable: string[] = [];
  for (const path of [...new Set([...b.keys(), ...c.keys()])].sort()) {
    const before = b.get(path);
    const after = c.get(path);
    if (before && after && JSON.stringify(before) === JSON.stringify(after)) continue;
    if (after?.kind === 'file') changes.push({ path, kind: 'file', executable: after.executable, digest: after.digest });
    else if (after?.kind === 'symlink') changes.push({ path, kind: 'symlink', target: after.target });
    else if (after?.kind === 'special') unrepresentable.push(path);
    else if (before && (before.kind === 'file' || before.kind === 'symlink')) changes.push({ path, kind: 'deleted' });
  }
  return { changes, unrepresentable };
}

/**
 * Keeps the verified change: `change.json` and a copy of each changed file from the workspace,
 * each copy's digest the one the verifier saw. A file whose bytes are not those is refused, and
 * the change kept before stays as it was.
 */
export function keepVerifiedChange(paths: RunPaths, change: KeptChange): void {
  const dir = changeFolder(paths);
  const next = `${dir}.next`;
  rmSync(next, { recursive: true, force: true });
  mkdirSync(join(next, 'files'), { recursive: true });
  try {
    for (const c of change.changes) {
      if (c.kind !== 'file') continue;
      const to = join(next, 'files', c.path);
      mkdirSync(dirname(to), { recursive: true });
      // The bytes whose digest the manifest took, read without following a link or opening a FIFO.
      if (copyRegular(join(paths.workspace, c.path), to, c.path) !== c.digest)
        throw new VerifiedChangeError(`${c.path} changed while the verified change was kept`);
    }
    const kept: ChangeFile = { schema_version: 1, base_commit: change.base_commit, changes: change.changes, summary: change.summary };
    writeFileAtomic(join(next, 'change.json'), JSON.stringify(kept), { tmpDir: paths.tmp });
  } catch (err) {
    rmSync(next, { recursive: true, force: true });
    throw err;
  }
  rmSync(dir, { recursive: true, force: true });
  renameSync(next, dir);
}

export class VerifiedChangeError extends Error {
  override name = 'VerifiedChangeError';
}

/** The verified change with each file's bytes, checked against the digests the verifier recorded. */
export function readVerifiedChange(paths: RunPaths): KeptChange<ChangeEntryWithBytes> {
  const file = join(changeFolder(paths), 'change.json');
  if (!existsSync(file))
    throw new VerifiedChangeError(
      `no verified change in ${changeFolder(paths)}: the run's state folder is not on this machine, or its run was not verified`,
    );
  const change = JSON.parse(readFileSync(file, 'utf8')) as ChangeFile;
  const changes = change.changes.map((c): ChangeEntryWithBytes => {
    if (c.kind !== 'file') return c;
    const bytes = readFileSync(join(changeFolder(paths), 'files', c.path));
    if (sha256(bytes) !== c.digest) throw new VerifiedChangeError(`${c.path} in the kept change differs from what was verified`);
    return { ...c, bytes };
  });
  return { base_commit: change.base_commit, changes, summary: change.summary ?? '' };
}
