/**
 * A unified diff (git's, as SWE-bench's `patch`, `test_patch` and `model_patch` are) applied to
 * files as text: each file's content after the patch, exact context only (a hunk may sit at
 * another line, never match approximately). What this cannot apply exactly it refuses, naming
 * the file: a binary patch, a rename or mode change without content, a hunk whose context is not
 * there. Paths are checked like a tool call's.
 */
import { applyPatch, parsePatch } from 'diff';
import { normalizeRepoPath } from './paths';

export class PatchError extends Error {
  override name = 'PatchError';
}

/** A file the patch touches: its path and its content after the patch (null: the patch deletes it). */
export interface PatchedFile {
  path: string;
  /** The content before (null: the patch creates it). */
  before: string | null;
  after: string | null;
}

const DEV_NULL = '/dev/null';

function repoPath(name: string | undefined, what: string): string {
  if (name === undefined || name === '') throw new PatchError(`the patch has a file without a ${what} name`);
  const bare = name.replace(/^[ab]\//, '');
  const checked = normalizeRepoPath(bare);
  if (!checked.ok) throw new PatchError(`the patch names ${JSON.stringify(name)}: ${checked.reason}`);
  return checked.path;
}

type Parsed = ReturnType<typeof parsePatch>[number];

/** The patch's files, each checked (no binary, rename, copy, mode-only or twice-changed file) with its path. */
function patchFiles(patch: string): { file: Parsed; path: string; creates: boolean; deletes: boolean }[] {
  if (/^(GIT binary patch|Binary files .* differ)$/m.test(patch))
    throw new PatchError('the patch has a binary change; only text diffs apply');
  if (/^(rename|copy) (from|to) /m.test(patch))
    throw new PatchError('the patch renames or copies a file; only edits, new and deleted files apply');
  let parsed;
  try {
    parsed = parsePatch(patch);
  } catch (err) {
    throw new PatchError(`the patch does not parse: ${(err as Error).message}`);
  }
  const files = parsed.filter((p) => p.oldFileName !== undefined || p.newFileName !== undefined || p.hunks.length > 0);
  if (files.length === 0 && patch.trim() !== '') throw new PatchError('the patch names no file');
  const seen = new Set<string>();
  return files.map((file) => {
    const creates = file.oldFileName === DEV_NULL;
    const deletes = file.newFileName === DEV_NULL;
    const path = deletes ? repoPath(file.oldFileName, 'old') : repoPath(file.newFileName, 'new');
    if (!creates && !deletes && repoPath(file.oldFileName, 'old') !== path)
      throw new PatchError(`the patch renames ${file.oldFileName} to ${file.newFileName}; only edits, new and deleted files apply`);
    if (seen.has(path)) throw new PatchError(`the patch changes ${path} twice`);
    seen.add(path);
    if (file.hunks.length === 0) throw new PatchError(`the patch changes only the mode of ${path}, or nothing`);
    return { file, path, creates, deletes };
  });
}

/** The paths `patch` touches, in its order (what `read` will be asked for). */
export function patchPaths(patch: string): string[] {
  return patchFiles(patch).map((f) => f.path);
}

/**
 * The files `patch` changes, each with its content before and after, in the patch's order.
 * `read` gives a file's current content (null: absent).
 */
export function applyUnifiedDiff(patch: string, read: (path: string) => string | null): PatchedFile[] {
  return patchFiles(patch).map(({ file, path, creates, deletes }) => {
    const before = read(path);
    if (creates && before !== null) throw new PatchError(`the patch creates ${path}, which exists`);
    if (!creates && before === null) throw new PatchError(`the patch changes ${path}, which does not exist`);
    const applied = applyPatch(before ?? '', file);
    if (applied === false) throw new PatchError(`the patch does not apply to ${path}: a hunk's context is not there`);
    if (deletes && applied !== '') throw new PatchError(`the patch deletes ${path} but leaves content in it`);
    return { path, before, after: deletes ? null : applied };
  });
}
