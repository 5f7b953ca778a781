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

/** The end state of a finished run, as every crash case checks it (tests/helpers/faults.ts). */
export async function endOf(handle: WorkflowHandleWithFirstExecutionRunId, stateDir: string) {
  const outcome = await outcomeThroughOutages(handle);
  return finishedState(outcome, stateDir, handle.firstExecutionRunId);
}
