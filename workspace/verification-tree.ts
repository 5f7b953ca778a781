/**
 * The trees the verifier's tests run in: a fresh copy of the run's workspace (or of its base, for
 * the base's outcomes) in the control folder, with the base's test configuration put back
 * (sandbox/test-config.ts) and a task's test patch applied. The workspace itself is never
 * touched by the verifier's tests: whatever they change is read off the copy (and fails the
 * verification), then the copy is removed.
 *
 * Hazards:
 * - A copy keeps links as links (workspace/workspace.ts copyTree). Nothing here writes
 *   through one: every folder on the way to a path written must be a folder, and an entry in the
 *   way is removed (a link unlinked, never followed) before a fresh file is made.
 * - Files read from a tree are read with the hostile reader (a test of an earlier run may have
 *   left anything), capped.
 */
import { cpSync, lstatSync, mkdirSync, mkdtempSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { applyUnifiedDiff, PatchError } from '../core/unified-diff';
import { onDisk } from '../host/disk';
import { readHostile } from './hostile-read';
import { copyTree, type RunPaths } from './workspace';

/** A test configuration file the run changed (sandbox/test-config.ts), and what its copy gets instead. */
export interface ConfigChange {
  path: string;
  /**
   * What the verification tree gets in its place: the base's entry as it is (`base`), this content
   * (package.json with the base's test part), or nothing (`null`: the base has none).
   */
  restore: 'base' | Uint8Array | null;
}

/** A file a patch reads is at most this large. */
const PATCHED_FILE_MAX = 16 * 1024 * 1024;

/** A fresh copy of `from` under the control folder; returns its folder (`tree` below it) and the folder for its reports. */
export function copyForTests(paths: RunPaths, from: string, label: string): { dir: string; tree: string; control: string } {
  return onDisk('workspace', `the verifier's copy of the ${label} in the control folder`, () => {
    const root = leftCopies(paths);
    mkdirSync(root, { recursive: true });
    const dir = mkdtempSync(join(root, `${label}-`));
    const tree = join(dir, 'tree');
    copyTree(from, tree);
    return { dir, tree, control: dir };
  });
}

/**
 * The folder of the copies: what an earlier attempt left there (its worker died while its tests
 * ran) is removed before a base run or a verification; the two never run at once, so none is in use.
 */
export const leftCopies = (paths: RunPaths): string => join(paths.control, 'verify');

/** Removes whatever is at `rel` below `root` (a link is unlinked, a folder removed without following links), after checking the folders above. */
function clear(root: string, rel: string): void {
  let dir = root;
  for (const part of rel.split('/').slice(0, -1)) {
    dir = join(dir, part);
    const st = lstatSync(dir, { throwIfNoEntry: false });
    if (st === undefined) return;
    if (!st.isDirectory()) {
      // Nothing can be below a file or a link: it goes (unfollowed), and with it the path.
      unlinkSync(dir);
      return;
    }
  }
  const abs = join(root, rel);
  const st = lstatSync(abs, { throwIfNoEntry: false });
  if (st === undefined) return;
  if (st.isDirectory()) rmSync(abs, { recursive: true, force: true });
  else unlinkSync(abs);
}

/** Makes the folders above `rel` below `root` (an entry in the way is removed first). */
function parents(root: string, rel: string): void {
  let dir = root;
  for (const part of rel.split('/').slice(0, -1)) {
    dir = join(dir, part);
    const st = lstatSync(dir, { throwIfNoEntry: false });
    if (st !== undefined && !st.isDirectory()) unlinkSync(dir);
    if (st === undefined || !st.isDirectory()) mkdirSync(dir);
  }
}

/** Writes `bytes` as a fresh file at `rel` below `root`. */
function put(root: string, rel: string, bytes: Uint8Array | string): void {
  clear(root, rel);
  parents(root, rel);
  writeFileSync(join(root, rel), bytes, { flag: 'wx', mode: 0o644 });
}

/** Puts the base's version of each changed configuration file into the tree (or removes one the base has not). */
export function restoreConfig(tree: string, baseline: string, changes: ConfigChange[]): void {
  for (const change of changes) {
    if (change.restore === null) clear(tree, change.path);
    else if (change.restore === 'base') {
      clear(tree, change.path);
      parents(tree, change.path);
      cpSync(join(baseline, change.path), join(tree, change.path), { recursive: true, verbatimSymlinks: true });
    } else put(tree, change.path, change.restore);
  }
}

/**
 * Applies a task's test patch to the tree as SWE-bench's harness does: each file it touches is
 * first put back as the base has it (the run's changes to those files are not judged), then the
 * patch. Throws a PatchError naming the file when it does not apply.
 */
export function applyTestPatch(tree: string, baseline: string, patch: string): string[] {
  const read = (root: string) => (path: string) => {
    const got = readHostile(join(root, path), PATCHED_FILE_MAX, path);
    if (got.ok) return got.bytes.toString('utf8');
    if (got.kind === 'missing') return null;
    throw new PatchError(`the test patch touches ${path}: ${got.detail}`);
  };
  // The files as the base has them: the patch is made against the base.
  const files = applyUnifiedDiff(patch, read(baseline));
  for (const f of files) {
    if (f.after === null) clear(tree, f.path);
    else put(tree, f.path, f.after);
  }
  return files.map((f) => f.path);
}

/**
 * A copy made ready for the verifier's tests (in a workspace thread): the base's test
 * configuration put back for `config` and the task's test patch applied. Returns why the patch
 * does not apply, or null.
 */
export function prepareCopy(tree: string, baseline: string, config: ConfigChange[], testPatch: string | null): string | null {
  restoreConfig(tree, baseline, config);
  if (testPatch === null) return null;
  try {
    applyTestPatch(tree, baseline, testPatch);
    return null;
  } catch (err) {
    if (err instanceof PatchError) return err.message;
    throw err;
  }
}
