/**
 * The workflow of `npm run bench`'s floor figure: steps of local activities that do nothing, on
 * the same SDK, server and machine as the harness, so the SDK's own cost of a step is measured
 * beside the harness's.
 */
import * as wf from '@temporalio/workflow';
import { STATUS_ATTRIBUTE } from '../core/search-attributes';

const { noop } = wf.proxyLocalActivities<{ noop(): Promise<void> }>({ startToCloseTimeout: '10 seconds' });
const regular = wf.proxyActivities<{ noop(): Promise<void> }>({ startToCloseTimeout: '10 seconds' });

/**
 * `steps` steps of `locals` no-op local activities each: two, the floor of a read-only
 * step (a decision, then the tool), or one, what a replay's read-only step now makes (the tool
 * runs with its decision).
 */
export async function noopSteps(steps: number, locals = 2): Promise<void> {
  for (let i = 0; i < locals * steps; i++) await noop();
}

/**
 * A run's Temporal work doing nothing: `activities` regular activities one after the other (each a
 * workflow task and a round trip through the server), then `locals` local activities (the
 * canonical run's counts, so its harness share has a floor measured beside it). The last
 * `elsewhere` of the activities go to `queue`, another worker's, as a pinned run's go to its host's
 * queue: the SDK hands a worker an activity with its workflow task (eager dispatch) only when the
 * activity is on the workflow's own queue, so each of those goes through the server's matching.
 */
export async function noopRun(activities: number, locals: number, elsewhere = 0, queue?: string): Promise<void> {
  const onQueue =
    queue === undefined ? regular : wf.proxyActivities<{ noop(): Promise<void> }>({ startToCloseTimeout: '10 seconds', taskQueue: queue });
  for (let i = 0; i < activities; i++) await (i < activities - elsewhere ? regular : onQueue).noop();
  for (let i = 0; i < locals; i++) await noop();
}

/** What ends a `noopParked` run. */
export const releaseSignal = wf.defineSignal('release');

/**
 * A run parked on a person, doing nothing else: the Temporal work a harness run does before it
 * parks (`activities` regular and `locals` local activities, no-ops), the status a parked run
 * shows (the AgentStatus search attribute, which the bench counts parked runs by), then a wait
 * for a Signal.
 */
export async function noopParked(activities: number, locals: number): Promise<void> {
  let released = false;
  wf.setHandler(releaseSignal, () => {
    released = true;
  });
  await noopRun(activities, locals);
  wf.upsertSearchAttributes([{ key: STATUS_ATTRIBUTE, value: 'awaiting_approval' }]);
  await wf.condition(() => released);
}
