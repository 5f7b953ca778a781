/**
 * The one diff builder: unified diffs of a file (apply_patch's proposal), of a workspace against
 * its baseline (show_diff, the verifier's paths) and of a task's files against its parent's
 * (merge_task). Run in a workspace thread (thread.ts): the texts are the model's and a test
 * process's, up to the file cap.
 *
 * Hazard: Myers' algorithm costs the product of the texts' length and their edit distance, which
 * a proposal chooses. Past MAX_EDIT_LENGTH edits the diff is given as the whole old text removed
 * and the whole new text added: the same change, in time linear in its size.
 */
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
export function textPatch(oldName: string, newName: string, oldText: string, newText: string): string {
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

function fileText(root: string, entries: Map<string, ManifestEntry>, path: string, capBytes: number): string | null {
  const entry = entries.get(path);
  if (!entry) return '';
  if (entry.kind === 'symlink') return `symlink -> ${entry.target}\n`;
  if (entry.kind === 'dir') return '';
  if (entry.kind === 'special') return `special file (${entry.type}), not opened\n`;
  const read = readHostile(join(root, path), capBytes, path);
  if (!read.ok) return `${read.detail}, not shown\n`;
  return decodeText(read.bytes);
}

const mode = (e: ManifestEntry | undefined) =>
  e?.kind === 'file' ? (e.executable ? '100755' : '100644') : e?.kind === 'symlink' ? '120000' : null;

/**
 * git's mode lines for a path whose mode is not the plain file's default: a changed executable
 * bit, a new executable file or link, a removed one. A plain text change has none, as in git.
 */
function modeLines(before: ManifestEntry | undefined, after: ManifestEntry | undefined): string {
  const a = mode(before);
  const b = mode(after);
  if (a !== null && b !== null) return a !== b ? `old mode ${a}\nnew mode ${b}\n` : '';
  if (a === null && b !== null && b !== '100644') return `new file mode ${b}\n`;
  if (a !== null && b === null && a !== '100644') return `deleted file mode ${a}\n`;
  return '';
}

/**
 * Unified diff of one path between the baseline and the workspace, with git's mode lines when the
 * mode is not the default. A file over `fileCap` bytes is not read (its diff says so).
 */
function diffOf(
  paths: RunPaths,
  base: Map<string, ManifestEntry>,
  current: Map<string, ManifestEntry>,
  path: string,
  fileCap: number,
): string {
  const modes = modeLines(base.get(path), current.get(path));
  const oldText = fileText(paths.baseline, base, path, fileCap);
  const newText = fileText(paths.workspace, current, path, fileCap);
  if (oldText === null || newText === null) return `${modes}Binary files a/${path} and b/${path} differ\n`;
  const oldName = base.has(path) ? `a/${path}` : '/dev/null';
  const newName = current.has(path) ? `b/${path}` : '/dev/null';
  return modes + textPatch(oldName, newName, oldText, newText);
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
    const part = diffOf(paths, base, current, path, fileCap);
    if (Buffer.byteLength(diff) + Buffer.byteLength(part) > capBytes) {
      truncated = true; // whole file diffs only
      break;
    }
    diff += part;
  }
  return { diff, paths: changed, truncated };
}

/** The diff of files from one folder onto another (a merge: the parent's files and the task's snapshot), up to `fileCap` bytes each. */
export function filesDiff(fromRoot: string, toRoot: string, files: { path: string; absent: boolean }[], fileCap: number): string {
  return files
    .map(({ path, absent }) => {
      const read = (dir: string) => {
        const r = readHostile(join(dir, path), fileCap, path);
        return r.ok ? r.bytes : Buffer.from(r.kind === 'missing' ? '' : `${r.detail}, not shown\n`);
      };
      const before = absent ? '' : (decodeText(read(fromRoot)) ?? '(binary)\n');
      const after = decodeText(read(toRoot)) ?? '(binary)\n';
      return textPatch(absent ? '/dev/null' : `a/${path}`, `b/${path}`, before, after);
    })
    .join('');
}
