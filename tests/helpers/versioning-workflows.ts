/**
 * The workflows of "build B" in tests/versioning.test.ts: the released ones, with agentRun taking
 * a one-millisecond timer before its first step. A history of the released agentRun has other
 * commands there (its patch markers, then its first activity), so no run started on build A
 * replays on this code (the suite shows it failing with a determinism violation): the change a
 * worker version must keep away from runs pinned to another. tests/history-check.test.ts shows
 * the history check catching it, and tests/wedged.test.ts wedges a run with it.
 * Test-only: bundled by those suites, never into the harness's bundles.
 */
import * as wf from '@temporalio/workflow';
import { agentRun as released } from '../../workflows/agentRun';

export { agentEval } from '../../workflows/agentEval';

export async function agentRun(...args: Parameters<typeof released>): ReturnType<typeof released> {
  await wf.sleep(1);
  return released(...args);
}
