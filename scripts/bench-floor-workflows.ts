/**
 * The workflow of `npm run bench`'s floor figure: steps of local activities that do nothing, on
 * the same SDK, server and machine as the harness, so the SDK's own cost of a step is measured
 * beside the harness's.
 */
import * as wf from '@temporalio/workflow';

const { noop } = wf.proxyLocalActivities<{ noop(): Promise<void> }>({ startToCloseTimeout: '10 seconds' });

/** `steps` steps of two no-op local activities each (a read-only step makes two: decide, then the tool). */
export async function noopSteps(steps: number): Promise<void> {
  for (let i = 0; i < 2 * steps; i++) await noop();
}
