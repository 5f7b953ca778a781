/**
 * Writing a tree read from a repository into a run's workspace (in a workspace thread): files in
 * batches as their bytes arrive, links last, then the baseline copy and its manifest.
 *
 * Hazards: a tree's paths come from whoever made the commit; they were refused before this if a
 * segment is empty, `.`, `..` or `.git` (workspace/repository.ts). Files are created with O_EXCL below
 * folders this code made and never through a link: a path whose parent is anything but a folder
 * is an error, and links are made only after every file, so no write can follow one.
 */
import { chmodSync, closeSync, existsSync, lstatSync, mkdirSync, openSync, rmSync, symlinkSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { PreparedWorkspace } from '../core/activities';
import { writeFileAtomic } from '../host/files';
import { copyTree, manifest, manifestDigest, type RunPaths } from './workspace';

/** Files of one batch: their bytes are `data[offset, offset + length)`. */
export interface FileBatch {
  files: { path: string; mode: number; offset: number; length: number }[];
  data: Uint8Array;
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

export function writeFiles(root: string, batch: FileBatch): void {
  mkdirSync(root, { recursive: true });
  for (const f of batch.files) createFile(root, f.path, batch.data.subarray(f.offset, f.offset + f.length), f.mode);
}

export function writeLinks(root: string, links: { path: string; target: string }[]): void {
  for (const l of links) {
    const path = join(root, l.path);
    mkdirSync(dirname(path), { recursive: true });
    if (lstatSync(dirname(path)).isSymbolicLink()) throw new Error(`${l.path}: a parent is a link`);
    symlinkSync(l.target, path);
  }
}

/** The workspace's manifest as the baseline's (after the baseline copy is made); returns its digest. */
export function writeBaselineManifest(paths: RunPaths): string {
  const entries = manifest(paths.workspace);
  writeFileAtomic(join(paths.control, 'baseline-manifest.json'), JSON.stringify(entries), { tmpDir: paths.tmp });
  return manifestDigest(entries);
}

/** The baseline copy and manifest, then `prepared.json` last (what makes the preparation idempotent). */
export function finishTree(paths: RunPaths): PreparedWorkspace {
  if (!existsSync(paths.workspace)) mkdirSync(paths.workspace, { recursive: true });
  copyTree(paths.workspace, paths.baseline);
  const digest = writeBaselineManifest(paths);
  const prepared: PreparedWorkspace = {
    workspace_digest: digest,
    files: manifest(paths.workspace).filter((e) => e.kind === 'file').length,
  };
  writeFileAtomic(join(paths.control, 'prepared.json'), JSON.stringify(prepared), { tmpDir: paths.tmp });
  return prepared;
}
