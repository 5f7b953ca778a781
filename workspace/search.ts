/**
 * The search tool's walk of a workspace (in a workspace thread: its cost is the workspace's size
 * and the model's query): every regular file below a folder, read as the hostile reader reads,
 * the matching lines up to the result caps. Links and other odd files are reported as skipped,
 * never followed.
 */
import { lstatSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { readHostile } from './hostile-read';
import { decodeText, splitLines } from './text';

const MAX_LINE_CHARS = 400;

export interface Match {
  path: string;
  line: number;
  text: string;
}

export interface SearchFound {
  matches: Match[];
  skipped: { path: string; reason: string }[];
  truncated: boolean;
}

/** Files below `rel`, sorted, into `out`; symlinks and odd files are reported as skipped, never followed. */
function listFiles(root: string, rel: string, out: string[], skipped: { path: string; reason: string }[]): void {
  // readdir/lstat errors propagate: an unreadable folder is an infrastructure failure, not "no matches".
  for (const name of readdirSync(rel === '' ? root : join(root, rel)).sort()) {
    const path = rel === '' ? name : `${rel}/${name}`;
    const stat = lstatSync(join(root, path));
    if (stat.isSymbolicLink()) skipped.push({ path, reason: 'symlink' });
    else if (stat.isDirectory()) listFiles(root, path, out, skipped);
    else if (!stat.isFile()) skipped.push({ path, reason: 'not a regular file' });
    else if (stat.nlink > 1) skipped.push({ path, reason: 'hardlink' });
    else out.push(path);
  }
}

/** The lines of the files below `base` (a folder, or one file) holding `query`, within the caps. */
export function searchWorkspace(
  root: string,
  base: string,
  isFolder: boolean,
  query: string,
  caps: { maxResults: number; maxFileBytes: number; searchBytes: number },
): SearchFound {
  const skipped: { path: string; reason: string }[] = [];
  const files: string[] = [];
  if (isFolder) listFiles(root, base, files, skipped);
  else files.push(base);
  const matches: Match[] = [];
  let bytes = 2;
  let truncated = false;

  outer: for (const path of files) {
    const read = readHostile(join(root, path), caps.maxFileBytes, path);
    if (!read.ok) {
      skipped.push({ path, reason: read.kind === 'too_large' ? 'too large' : read.detail });
      continue;
    }
    const text = decodeText(read.bytes);
    if (text === null) {
      skipped.push({ path, reason: 'binary or not UTF-8' });
      continue;
    }
    const lines = splitLines(text);
    for (let i = 0; i < lines.length; i++) {
      if (!lines[i].includes(query)) continue;
      const line = lines[i].replace(/\r?\n$/, '');
      // A line cut at the cap makes the result partial, and says so.
      if (line.length > MAX_LINE_CHARS) truncated = true;
      const match = { path, line: i + 1, text: line.length > MAX_LINE_CHARS ? line.slice(0, MAX_LINE_CHARS) : line };
      const size = Buffer.byteLength(JSON.stringify(match)) + 1;
      if (matches.length >= caps.maxResults || bytes + size > caps.searchBytes) {
        truncated = true;
        break outer;
      }
      matches.push(match);
      bytes += size;
    }
  }
  skipped.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  return { matches, skipped, truncated };
}
