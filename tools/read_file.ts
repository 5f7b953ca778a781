import { errorResult, okResult, type ToolResult } from '../core/contracts';
import type { ReadFileArgs } from '../core/tools';
import { readHostile } from '../workspace/hostile-read';
import { sha256 } from '../host/digest';
import { resolveInWorkspace } from '../workspace/fs-safety';
import { decodeText, splitLines, type ToolContext } from './context';

export function readFile(ctx: ToolContext, callId: string, args: ReadFileArgs): ToolResult {
  const resolved = resolveInWorkspace(ctx.paths.workspace, args.path);
  if (!resolved.ok) return errorResult(callId, resolved.error, { path: args.path, reason: resolved.reason });
  if (resolved.stat === null) return errorResult(callId, 'not_found', { path: args.path, reason: `${args.path} does not exist` });
  if (resolved.stat.isDirectory())
    return errorResult(callId, 'invalid_fields', { path: args.path, reason: 'path is a folder; use search to list its contents' });
  if (resolved.stat.size > ctx.limits.maxFileBytes) {
    return errorResult(callId, 'too_large', { path: args.path, size: resolved.stat.size, limit: ctx.limits.maxFileBytes });
  }
  // Read as a test may have left it: never through a link, never waiting on a FIFO, never past the cap.
  const read = readHostile(resolved.abs, ctx.limits.maxFileBytes, args.path);
  if (!read.ok)
    return read.kind === 'too_large'
      ? errorResult(callId, 'too_large', { path: args.path, reason: read.detail, limit: ctx.limits.maxFileBytes })
      : errorResult(callId, read.kind === 'missing' ? 'not_found' : 'path_denied', { path: args.path, reason: read.detail });
  const bytes = read.bytes;
  const text = decodeText(bytes);
  if (text === null) return errorResult(callId, 'binary_file', { path: args.path });
  const lines = splitLines(text);
  const start = args.start ?? 1;
  const lastWanted = Math.min(args.end ?? lines.length, lines.length);
  if (lines.length > 0 && start > lines.length) {
    return errorResult(callId, 'invalid_fields', { path: args.path, reason: `start ${start} is past the last line ${lines.length}` });
  }
  // Whole lines only: stop before the line that would cross the cap.
  let out = '';
  let end = start - 1;
  let truncated = false;
  for (let n = start; n <= lastWanted; n++) {
    const line = lines[n - 1];
    if (Buffer.byteLength(out) + Buffer.byteLength(line) > ctx.limits.readBytes) {
      truncated = true;
      break;
    }
    out += line;
    end = n;
  }
  return okResult(callId, { text: out, version: sha256(bytes), total_lines: lines.length, start, end }, truncated);
}
