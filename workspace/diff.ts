/**
 * The one diff builder: every diff is built path by path by `fileDiff` from the path's two sides
 * (absent, or a text and a mode), whatever gives the sides: a file's text before and after a
 * proposal (apply_patch), a workspace against its baseline (show_diff, the verifier's paths) and
 * a task's files onto its parent's (merge_task). Run in a workspace thread (thread.ts): the texts
 * are the model's and a test process's, up to the file cap.
 *
 * Hazard: Myers' algorithm costs the product of the texts' length and their edit distance, which
 * a proposal chooses. Past MAX_EDIT_LENGTH edits the diff is given as the whole old text removed
 * and the whole new text added: the same change, in time linear in its size.
 */
import { lstatSync } from 'node:fs';
import { join } from 'node:path';
import { createTwoFilesPatch } from 'diff';
import { readHostile } from './hostile-read';
import { decodeText } from './text';
import { changedFiles, manifest, type ManifestEntry } from './manifest';
import { baselineManifest, type RunPaths } from './workspace';

/** Edits past which a diff is a whole replacement. */
export const MAX_EDIT_LENGTH = 2000;

/** Lines of `text` with their endings; the last without one gets git's marker. */
function hunkLines(text: string, sign: '+' | '-'): string[] {
  if (text === '') return [];
  const lines = text.split(/(?<=\n)/);
  const out = lines.map((l) => `${sign}${l}`);
  if (!text.endsWith('\n')) out[out.length - 1] += '\n\\ No newline at end of file\n';
  return out;
}

/** A unified diff (3 lines of context), or the whole replacement when the edit is too long to find. */
function textPatch(oldName: string, newName: string, oldText: string, newText: string): string {
  const patch = createTwoFilesPatch(oldName, newName, oldText, newText, undefined, undefined, {
    context: 3,
    maxEditLength: MAX_EDIT_LENGTH,
  });
  if (patch !== undefined) return patch;
  const removed = hunkLines(oldText, '-');
  const added = hunkLines(newText, '+');
  const count = (t: string) => (t === '' ? 0 : t.split(/(?<=\n)/).length);
  const range = (start: number, n: number) => (n === 0 ? `${start === 0 ? 0 : start},0` : `${start},${n}`);
  return [
    '===================================================================\n',
    `--- ${oldName}\n`,
    `+++ ${newName}\n`,
    `@@ -${range(count(oldText) === 0 ? 0 : 1, count(oldText))} +${range(count(newText) === 0 ? 0 : 1, count(newText))} @@\n`,
    ...removed,
    ...added,
  ].join('');
}

/** git's mode of a file: a plain file, an executable one, a symbolic link. */
export type FileMode = '100644' | '100755' | '120000';

/**
 * One side of a path's diff: null when the path is absent there; otherwise its text (null: not
 * text, shown as git shows a binary change) and its mode (null: neither a file nor a link).
 */
export type DiffSide = null | { text: string | null; mode: FileMode | null };

/**
 * The diff of one path, the one way every diff is built: git's mode lines when the mode is not
 * the plain file's default, then the text's unified diff, or git's line for a binary change.
 */
export function fileDiff(path: string, before: DiffSide, after: DiffSide): string {
  const modes = modeLines(before?.mode ?? null, after?.mode ?? null);
  if (before?.text === null || after?.text === null) return `${modes}Binary files a/${path} and b/${path} differ\n`;
  const oldName = before === null ? '/dev/null' : `a/${path}`;
  const newName = after === null ? '/dev/null' : `b/${path}`;
  return modes + textPatch(oldName, newName, before?.text ?? '', after?.text ?? '');
}

/**
 * git's mode lines for a path whose mode is not the plain file's default: a changed executable
 * bit, a new executable file or link, a removed one. A plain text change has none, as in git.
 */
function modeLines(a: FileMode | null, b: FileMode | null): string {
  if (a !== null && b !== null) return a !== b ? `old mode ${a}\nnew mode ${b}\n` : '';
  if (a === null && b !== null && b !== '100644') return `new file mode ${b}\n`;
  if (a !== null && b === null && a !== '100644') return `deleted file mode ${a}\n`;
  return '';
}

export const fileMode = (executable: boolean): FileMode => (executable ? '100755' : '100644');

/**
 * A regular file's side, read as a test process may have left it, up to `capBytes`; what cannot be
 * read is said instead of its text (a file gone meanwhile: `missing`, when given).
 */
function readSide(abs: string, path: string, capBytes: number, mode: FileMode, missing: string | null = null): DiffSide {
  const read = readHostile(abs, capBytes, path);
  if (read.ok) return { text: decodeText(read.bytes), mode };
  return { text: read.kind === 'missing' && missing !== null ? missing : `${read.detail}, not shown\n`, mode };
}

/** A manifest entry's side: a file's text, a link's target, what a special file is. A file over `capBytes` is not read. */
function entrySide(root: string, entry: ManifestEntry | undefined, capBytes: number): DiffSide {
  if (entry === undefined) return null;
  switch (entry.kind) {
    case 'file':
      return readSide(join(root, entry.path), entry.path, capBytes, fileMode(entry.executable));
    case 'symlink':
      return { text: `symlink -> ${entry.target}\n`, mode: '120000' };
    case 'dir':
      return { text: '', mode: null };
    case 'special':
      return { text: `special file (${entry.type}), not opened\n`, mode: null };
  }
}

/** The workspace's changes against its baseline: whole file diffs up to `capBytes`, and every changed path. */
export function workspaceDiff(paths: RunPaths, capBytes: number, fileCap: number): { diff: string; paths: string[]; truncated: boolean } {
  const baseEntries = baselineManifest(paths);
  const currentEntries = manifest(paths.workspace);
  const changed = changedFiles(baseEntries, currentEntries);
  const base = new Map(baseEntries.map((e) => [e.path, e]));
  const current = new Map(currentEntries.map((e) => [e.path, e]));
  let diff = '';
  let truncated = false;
  for (const path of changed) {
    if (capBytes === 0) break;
    const part = fileDiff(path, entrySide(paths.baseline, base.get(path), fileCap), entrySide(paths.workspace, current.get(path), fileCap));
    if (Buffer.byteLength(diff) + Buffer.byteLength(part) > capBytes) {
      truncated = true; // whole file diffs only
      break;
    }
    diff += part;
  }
  return { diff, paths: changed, truncated };
}

/**
 * The diff of files from one folder onto another (a merge: the parent's files and the task's
 * snapshot, each a regular file or absent), with the mode each file has after, up to `fileCap`
 * bytes each.
 */
export function filesDiff(
  fromRoot: string,
  toRoot: string,
  files: { path: string; absent: boolean; executable: boolean }[],
  fileCap: number,
): string {
  return files
    .map(({ path, absent, executable }) => {
      const from = join(fromRoot, path);
      const fromMode = fileMode(((lstatSync(from, { throwIfNoEntry: false })?.mode ?? 0) & 0o111) !== 0);
      const before = absent ? null : readSide(from, path, fileCap, fromMode, '');
      const after = readSide(join(toRoot, path), path, fileCap, fileMode(executable), '');
      return fileDiff(path, before, after);
    })
    .join('');
}
