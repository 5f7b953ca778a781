/**
 * A Temporal server that is away for a while: killed and starting again, a cluster whose
 * PostgreSQL restarts, a network cut. The SDK's own gRPC retries give up after a few seconds;
 * what a client must not lose (a run's start, its result) is asked again here while the error
 * says the server is away, up to a patience.
 *
 * Hazard: a cluster's frontend that has just started answers "Namespace default is not found"
 * for a few seconds, until its namespace cache is filled from the database. That is the server
 * being away, not a missing namespace: a start given up on it is a lost run (docs/faults.md).
 */
import { isGrpcServiceError, ServiceError, WorkflowExecutionAlreadyStartedError, type Client } from '@temporalio/client';
import { NamespaceNotFoundError } from '@temporalio/common';

/** How long a client waits for a server that is away before it gives up (5 minutes). */
export const SERVER_AWAY_PATIENCE_MS = 300_000;

/** gRPC codes of a server that does not answer: nothing listens or the link is cut (UNAVAILABLE, 14), or the call timed out (DEADLINE_EXCEEDED, 4). */
const AWAY_CODES = new Set<number>([14, 4]);

/** Whether `err` says the server is away for now (the same request may succeed later). */
export function serverAway(err: unknown): boolean {
  if (err instanceof NamespaceNotFoundError) return true;
  const grpc = err instanceof ServiceError ? err.cause : err;
  return isGrpcServiceError(grpc) && AWAY_CODES.has(grpc.code);
}

export interface Patience {
  /** How long to keep asking (default SERVER_AWAY_PATIENCE_MS). */
  ms?: number;
  /** Called once per failed attempt with the server's error, e.g. to say so on stderr. */
  onAway?: (err: unknown) => void;
}

/** Runs `call` again (every second) while it fails with the server away, up to the patience. */
export async function whileServerAway<T>(call: (attempt: number) => Promise<T>, patience: Patience = {}): Promise<T> {
  const deadline = Date.now() + (patience.ms ?? SERVER_AWAY_PATIENCE_MS);
  for (let attempt = 1; ; attempt++) {
    try {
      return await call(attempt);
    } catch (err) {
      if (!serverAway(err) || Date.now() >= deadline) throw err;
      patience.onAway?.(err);
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}

/**
 * Starts a workflow, asking again while the server is away. A start whose answer was lost may
 * have been kept: asked again, the server says the workflow is already started. Then the running
 * workflow with that id is the one this call started (ids are the caller's, one per start), and
 * its handle is returned with the first run's id, as `start` gives it.
 */
export async function startThroughOutage<H extends { firstExecutionRunId: string }>(
  client: Client,
  workflowId: string,
  start: () => Promise<H>,
  patience: Patience = {},
): Promise<H> {
  return whileServerAway(async (attempt) => {
    try {
      return await start();
    } catch (err) {
      if (attempt === 1 || !(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
      const described = await client.workflow.getHandle(workflowId).describe();
      const firstExecutionRunId = described.raw.workflowExecutionInfo?.firstRunId || described.runId;
      const handle = client.workflow.getHandle(workflowId, undefined, { firstExecutionRunId });
      return { ...handle, firstExecutionRunId } as unknown as H;
    }
  }, patience);
}
