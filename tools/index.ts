/**
 * The handlers of the tool table (core/tools.ts), one per tool, typed by its kind: the compiler
 * refuses a tool without a handler and a handler without a tool.
 * - `read` and `test`: the function the tool activity runs (activities/tools.ts);
 * - `write`: the write path's two halves (activities/writes.ts);
 * - `orchestration`: carried out by the workflow on its sub-runs (workflows/subruns.ts); one whose
 *   table row says `writes: true` (merge_task) gives the workflow its two halves here, as a write
 *   does (run by activities/merge.ts).
 */
import type { ToolResult } from '../core/contracts';
import { TOOLS, type ToolArgsByName, type ToolName } from '../core/tools';
import { preparePatch, writePatch } from './apply_patch';
import type { ToolContext } from './context';
import { prepareMerge, writeMerge } from './merge_task';
import { readFile } from './read_file';
import { runTests } from './run_tests';
import { search } from './search';
import { showDiff } from './show_diff';

/** A tool the activity runs: its one result. */
export type RunHandler<N extends ToolName> = (
  ctx: ToolContext,
  callId: string,
  args: ToolArgsByName[N],
) => ToolResult | Promise<ToolResult>;

/** A write's two halves: prepared without side effect, written once approved. */
export interface WriteHalves<P, W> {
  prepare: P;
  write: W;
}

export type WriteHandler = WriteHalves<typeof preparePatch, typeof writePatch>;

/** The workflow carries the tool out. */
export type WorkflowHandler = 'workflow';

/** An orchestration tool whose outcome is a write (`writes: true`, merge_task): its two halves. */
export type MergeHandler = WriteHalves<typeof prepareMerge, typeof writeMerge>;

type KindOf<N extends ToolName> = (typeof TOOLS)[N]['kind'];
type Writes<N extends ToolName> = (typeof TOOLS)[N] extends { writes?: true } ? true : false;
export type HandlerOf<N extends ToolName> =
  KindOf<N> extends 'read' | 'test'
    ? RunHandler<N>
    : KindOf<N> extends 'write'
      ? WriteHandler
      : Writes<N> extends true
        ? MergeHandler
        : WorkflowHandler;

export type ToolHandlers = { [N in ToolName]: HandlerOf<N> };

export const HANDLERS: ToolHandlers = {
  read_file: readFile,
  search,
  apply_patch: { prepare: preparePatch, write: writePatch },
  run_tests: (ctx, callId) => runTests(ctx, callId),
  show_diff: (ctx, callId) => showDiff(ctx, callId),
  dispatch_task: 'workflow',
  message_task: 'workflow',
  stop_task: 'workflow',
  task_status: 'workflow',
  merge_task: { prepare: prepareMerge, write: writeMerge },
};

/** The function the tool activity runs for `name`, or null when the tool is not the activity's. */
export function runHandler(name: ToolName): RunHandler<ToolName> | null {
  const kind = TOOLS[name].kind;
  return kind === 'read' || kind === 'test' ? (HANDLERS[name] as unknown as RunHandler<ToolName>) : null;
}
