import { errorResult, okResult, type ToolResult } from '../core/contracts';
import { runCandidateTests } from '../sandbox/test-runner';
import type { ToolContext } from './context';

/**
 * run_tests: passed is ok; failing tests are `tests_failed`; anything unusable is `tests_incomplete`.
 * What the run changed in the workspace was undone; `data.unreceipted` tells the model which paths.
 */
export async function runTests(ctx: ToolContext, callId: string): Promise<ToolResult> {
  const data = await runCandidateTests({
    backend: ctx.backend,
    fixture: ctx.fixture,
    paths: ctx.paths,
    limits: ctx.limits,
    timeoutMs: ctx.timeoutMs,
    signal: ctx.signal,
    onProgress: ctx.heartbeat,
  });
  if (data.status === 'passed') return okResult(callId, data);
  return errorResult(callId, data.status === 'failed' ? 'tests_failed' : 'tests_incomplete', data);
}
