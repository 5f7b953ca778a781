/** The tool calls that are activities: the read-only tools and run_tests, each result stored whole. */
import { CancelledFailure } from '@temporalio/common';
import type { Elsewhere, RunRef } from '../core/activities';
import type { ToolResult } from '../core/contracts';
import { nonRetryable } from '../core/failures';
import { READ_ONLY_TOOLS, toolKind, type ValidCall } from '../core/tools';
import { resultView, type CallView, type ResultView } from '../core/transcript';
import type { TestRunData } from '../sandbox/test-runner';
import type { ToolContext } from '../tools/context';
import { faultAfter } from '../host/faults';
import { runHandler } from '../tools';
import { infrastructure, type Kit } from './kit';

export function toolActivities(kit: Kit) {
  /**
   * Runs a stored call; its whole result is stored (one sync) and history gets its view, with
   * what a test run changed and was undone, whole (the workflow traces and counts it).
   */
  const toolResult = async (ref: RunRef, view: CallView, timeoutMs: number): Promise<ResultView> => {
    const ctx = kit.toolContext(ref, timeoutMs);
    let result = await runTool(ctx, kit.storedCall(view, view.name));
    let testsRef: string | undefined;
    const tests = toolKind(view.name) === 'test';
    if (tests && result.data !== null) {
      // Every test with its outcome is stored on its own: the trace names it (`trace --full` shows
      // it), the result the model reads does not carry a list as long as the suite.
      const { tests, ...data } = result.data as TestRunData;
      if (tests) testsRef = kit.store.put('tests', tests);
      result = { ...result, data };
    }
    const unreceipted = tests ? (result.data as TestRunData | null)?.unreceipted : undefined;
    const resultRef = kit.store.put('result', result);
    return {
      ...resultView(result, resultRef),
      ...(unreceipted ? { unreceipted: { step: 'run_tests', ...unreceipted } } : {}),
      ...(testsRef ? { tests_ref: testsRef } : {}),
    };
  };

  return {
    /** The read-only tools: read_file, search, show_diff and run_tests. The full result stays in the store. */
    async executeTool(ref: RunRef, view: CallView, timeoutMs: number): Promise<ResultView> {
      return toolResult(ref, view, timeoutMs);
    },

    /** read_file, search or show_diff as a local activity, on the run's host only (see localDecide). */
    async localTool(hostQueue: string | null, ref: RunRef, view: CallView, timeoutMs: number): Promise<ResultView | Elsewhere> {
      if (!READ_ONLY_TOOLS.has(view.name)) throw nonRetryable('ProtocolError', `${view.name} is never a local activity`);
      if (!kit.onThisHost(hostQueue)) return kit.elsewhere();
      const result = await toolResult(ref, view, timeoutMs);
      faultAfter('after_local_activity');
      return result;
    },
  };
}

/**
 * A read-only call run with its decision (activities/decide.ts, `read_ahead`): its result, for
 * the caller to store in its own commit; null when the call is not read-only or its handler
 * threw (the run then runs it as a step of its own, which reports that).
 */
export async function readAhead(kit: Kit, ref: RunRef, call: ValidCall, timeoutMs: number): Promise<ToolResult | null> {
  if (!READ_ONLY_TOOLS.has(call.name)) return null;
  try {
    return await runTool(kit.toolContext(ref, timeoutMs), call);
  } catch {
    return null;
  }
}

/** The table's handler of a read or a test; a write or an orchestration tool is never this activity's. */
async function runTool(ctx: ToolContext, call: ValidCall): Promise<ToolResult> {
  const kind = toolKind(call.name);
  const handler = runHandler(call.name);
  if (handler === null) {
    const by = kind === 'write' ? 'goes through preparePatch and writePatch' : 'is carried out by the workflow';
    throw nonRetryable('ProtocolError', `${call.name} ${by}, not as a tool activity`);
  }
  if (kind === 'read') return handler(ctx, call.call_id, call.arguments);
  const result = await Promise.resolve(handler(ctx, call.call_id, call.arguments)).catch(infrastructure);
  // A cancelled activity must say so, or the workflow would take the partial result.
  if (ctx.signal.aborted) throw new CancelledFailure(`${call.name} was cancelled`);
  return result;
}
