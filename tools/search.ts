import { lstatSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { errorResult, okResult, type ToolResult } from '../core/contracts';
import type { SearchArgs } from '../core/tools';
import { readHostile } from '../host/workspace/hostile-read';
import { resolveInWorkspace } from '../host/workspace/fs-safety';
import { decodeText, splitLines, type ToolContext } from './context';

const DEFAULT_MAX_RESULTS = 50;
const MAX_LINE_CHARS = 400;

interface Match {
  path: string;
  line: number;
  text: string;
}

/** Files below `rel`, sorted; symlinks and odd files are reported as skipped, never followed. */
function listFiles(root: string, rel: string, skipped: { path: string; reason: string }[]): string[] {
  const out: string[] = [];
  // readdir/lstat errors propagate: an unreadable folder is an infrastructure failure, not "no matches".
  for (const name of readdirSync(rel === '' ? root : join(root, rel)).sort()) {
    const path = rel === '' ? name : `${rel}/${name}`;
    const stat = lstatSync(join(root, path));
    if (stat.isSymbolicLink()) skipped.push({ path, reason: 'symlink' });
    else if (stat.isDirectory()) out.push(...listFiles(root, path, skipped));
    else if (!stat.isFile()) skipped.push({ path, reason: 'not a regular file' });
    else if (stat.nlink > 1) skipped.push({ path, reason: 'hardlink' });
    else out.push(path);
  }
  return out;
}

export function search(ctx: ToolContext, callId: string, args: SearchArgs): ToolResult {
  const base = args.path ?? '';
  const resolved = resolveInWorkspace(ctx.paths.workspace, base);
  if (!resolved.ok) return errorResult(callId, resolved.error, { path: base, reason: resolved.reason });
  if (resolved.stat === null) return errorResult(callId, 'not_found', { path: base, reason: `${base} does not exist` });

  const skipped: { path: string; reason: string }[] = [];
  const files = resolved.stat.isDirectory() ? listFiles(ctx.paths.workspace, base, skipped) : [base];
  const limit = args.max_results ?? DEFAULT_MAX_RESULTS;
  const matches: Match[] = [];
  let bytes = 2;
  let truncated = false;

  outer: for (const path of files) {
    const read = readHostile(join(ctx.paths.workspace, path), ctx.limits.maxFileBytes, path);
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
      if (!lines[i].includes(args.query)) continue;
      const line = lines[i].replace(/\r?\n$/, '');
      // A line cut at the cap makes the result partial, and says so.
      if (line.length > MAX_LINE_CHARS) truncated = true;
      const match = { path, line: i + 1, text: line.length > MAX_LINE_CHARS ? line.slice(0, MAX_LINE_CHARS) : line };
      const size = Buffer.byteLength(JSON.stringify(match)) + 1;
      if (matches.length >= limit || bytes + size > ctx.limits.searchBytes) {
        truncated = true;
        break outer;
      }
      matches.push(match);
      bytes += size;
    }
  }
  skipped.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  return okResult(callId, { matches, skipped }, truncated);
}
