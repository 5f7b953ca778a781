import { join } from 'node:path';
import { createTwoFilesPatch } from 'diff';
import { okResult, type ToolResult } from '../core/contracts';
import { readHostile } from '../host/workspace/hostile-read';
import { baselineManifest, manifest, type ManifestEntry, type RunPaths } from '../host/workspace/workspace';
import { decodeText, type ToolContext } from './context';
import { changedFiles } from '../host/workspace/manifest';

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
export function diffOf(
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
  return modes + createTwoFilesPatch(oldName, newName, oldText, newText, undefined, undefined, { context: 3 });
}

export function workspaceDiff(paths: RunPaths, capBytes: number, fileCap: number): { diff: string; paths: string[]; truncated: boolean } {
  const baseEntries = baselineManifest(paths);
  const currentEntries = manifest(paths.workspace);
  const changed = changedFiles(baseEntries, currentEntries);
  const base = new Map(baseEntries.map((e) => [e.path, e]));
  const current = new Map(currentEntries.map((e) => [e.path, e]));
  let diff = '';
  let truncated = false;
  for (const path of changed) {
    const part = diffOf(paths, base, current, path, fileCap);
    if (Buffer.byteLength(diff) + Buffer.byteLength(part) > capBytes) {
      truncated = true; // whole file diffs only
      break;
    }
    diff += part;
  }
  return { diff, paths: changed, truncated };
}

export function showDiff(ctx: ToolContext, callId: string): ToolResult {
  const { diff, paths, truncated } = workspaceDiff(ctx.paths, ctx.limits.diffBytes, ctx.limits.maxFileBytes);
  return okResult(callId, { diff, paths }, truncated);
}
