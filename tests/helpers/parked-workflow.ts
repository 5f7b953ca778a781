/**
 * A workflow that waits for its `go` Signal, for tests/traces.test.ts: what a run kept in the
 * worker's cache costs the workflow thread with the traced bundle's interceptors.
 * Test-only: bundled by that suite, never into the harness's bundles.
 */
import * as wf from '@temporalio/workflow';

export const go = wf.defineSignal('go');
export const waiting = wf.defineQuery<boolean>('waiting');

export async function parked(): Promise<void> {
  let going = false;
  wf.setHandler(go, () => void (going = true));
  wf.setHandler(waiting, () => !going);
  await wf.condition(() => going);
}
