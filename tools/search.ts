import { errorResult, okResult, type ToolResult } from '../core/contracts';
import type { SearchArgs } from '../core/tools';
import { resolveInWorkspace } from '../workspace/fs-safety';
import { offThread } from '../workspace/thread';
import type { ToolContext } from './context';

const DEFAULT_MAX_RESULTS = 50;

/** The search tool: the path checked here, the walk and the reads in a workspace thread (workspace/search.ts). */
export async function search(ctx: ToolContext, callId: string, args: SearchArgs): Promise<ToolResult> {
  const base = args.path ?? '';
  const resolved = resolveInWorkspace(ctx.paths.workspace, base);
  if (!resolved.ok) return errorResult(callId, resolved.error, { path: base, reason: resolved.reason });
  if (resolved.stat === null) return errorResult(callId, 'not_found', { path: base, reason: `${base} does not exist` });
  const caps = {
    maxResults: args.max_results ?? DEFAULT_MAX_RESULTS,
    maxFileBytes: ctx.limits.maxFileBytes,
    searchBytes: ctx.limits.searchBytes,
  };
  const found = await offThread('search', [ctx.paths.workspace, base, resolved.stat.isDirectory(), args.query, caps], {
    key: ctx.paths.workspace,
  });
  return okResult(callId, { matches: found.matches, skipped: found.skipped }, found.truncated);
}
