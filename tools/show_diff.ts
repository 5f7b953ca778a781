import { okResult, type ToolResult } from '../core/contracts';
import { offThread } from '../workspace/thread';
import type { ToolContext } from './context';

/** The workspace's changes against its baseline, whole file diffs up to the cap (built in a workspace thread). */
export async function showDiff(ctx: ToolContext, callId: string): Promise<ToolResult> {
  const { diff, paths, truncated } = await offThread('workspaceDiff', [ctx.paths, ctx.limits.diffBytes, ctx.limits.maxFileBytes], {
    key: ctx.paths.workspace,
  });
  return okResult(callId, { diff, paths }, truncated);
}
