/**
 * One canonical run through a server fault, shared by the server-fault suite and its soak: a
 * real worker process, the run started and its result read by a client that asks again while
 * the server is away (client/server-away.ts), and the end every case must reach.
 */
import type { WorkflowHandle, WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { startRun } from '../../client/run-access';
import { whileServerAway } from '../../client/server-away';
import type { RunOutcome } from '../../core/run-view';
import { holdLine, type FaultPoint } from '../../host/faults';
import { finishedState, type WorkerProcess } from './faults';
import { canonicalInput, waitFor } from './temporal';
import type { ServerUnderTest } from '../../scripts/support/servers';

/** The run's outcome, read again while the server is away (killed, restarting, cut off). */
export function outcomeThroughOutages(handle: WorkflowHandle, ms = 600_000): Promise<RunOutcome> {
  return whileServerAway(() => handle.result() as Promise<RunOutcome>, { ms });
}

/** Starts the canonical run (writes approved by policy) on `taskQueue` through the server's own client. */
export function startCanonical(server: ServerUnderTest, taskQueue: string, workflowId = `${taskQueue}-run`) {
  return startRun(server.client, canonicalInput('canonical'), { taskQueue, workflowId });
}

/** Resolves when a worker started with AGENT_FAULT=point and AGENT_FAULT_HOLD_MS holds there. */
export function holding(worker: WorkerProcess, point: FaultPoint, ms = 120_000): Promise<true> {
  return waitFor(`the worker holding at ${point}`, async () => worker.log().includes(holdLine(point)) || null, ms);
}

/**
 * The end state of a finished run, as every crash case checks it (tests/helpers/faults.ts); or,
 * when the run has not ended by `by` (ms since the epoch, set before the test's own timeout),
 * where it stands: its status, its pending work and the worker's last lines, which the failed
 * comparison then prints.
 */
export async function endOf(handle: WorkflowHandleWithFirstExecutionRunId, stateDir: string, worker: WorkerProcess, by: number) {
  // Left behind when the run is late (the race has observed it, so its end is no unhandled rejection).
  const ending = outcomeThroughOutages(handle);
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), Math.max(0, by - Date.now()))));
  try {
    const outcome = await Promise.race([ending, late]);
    if (outcome === null) return { not_ended: await standing(handle, worker) };
    return finishedState(outcome, stateDir, handle.firstExecutionRunId);
  } finally {
    clearTimeout(timer);
  }
}

async function standing(handle: WorkflowHandle, worker: WorkerProcess) {
  const worker_log = worker.log().slice(-4000);
  try {
    const { status, raw } = await handle.client.withDeadline(Date.now() + 10_000, () => handle.describe());
    return {
      status: status.name,
      pending_activities: (raw.pendingActivities ?? []).map((a) => ({
        type: a.activityType?.name,
        state: a.state,
        attempt: a.attempt,
        last_failure: a.lastFailure?.message ?? null,
      })),
      pending_workflow_task: raw.pendingWorkflowTask
        ? { state: raw.pendingWorkflowTask.state, attempt: raw.pendingWorkflowTask.attempt }
        : null,
      worker_log,
    };
  } catch (err) {
    return { described: `not: ${(err as Error).message}`, worker_log };
  }
}

/**
 * Each case's last step and when it began, so that a test whose cases run out of time says
 * where each one was (a hang in a step with no bound of its own: a worker's start, the link's
 * API), instead of jest's bare timeout.
 */
export class CaseSteps {
  private readonly at = new Map<string, string>();

  step(who: string, what: string): void {
    this.at.set(who, `${what}, since ${new Date().toISOString()}`);
  }

  /** `work`, or an error naming each case's step when it has not settled by `by` (ms since the epoch). */
  async within<T>(work: Promise<T>, by: number): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(new Error(`the cases were not done in time; each one's step: ${JSON.stringify(Object.fromEntries(this.at), null, 2)}`)),
        Math.max(0, by - Date.now()),
      );
    });
    try {
      return await Promise.race([work, late]);
    } finally {
      clearTimeout(timer);
    }
  }
}
